"""Host facts: gathered once at the edge (``host.gather.gather_facts``) or replayed from a capture
(``host.gather.load_inventory``), as the models of ``host.facts``. Nothing above this layer reads the host.

The package itself loads nothing: importing a light module of it (``rigctl.host.early``) must not load
pydantic and every facts model with it."""
