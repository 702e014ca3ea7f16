"""Host facts: gathered once at the edge (``gather_facts``) or replayed from a capture
(``load_inventory``). Nothing above this layer reads the host."""

from rigctl.host.facts import FACTS_SCHEMA, HostFacts
from rigctl.host.gather import facts_for_recipe, gather_facts, load_inventory

__all__ = ["FACTS_SCHEMA", "HostFacts", "facts_for_recipe", "gather_facts", "load_inventory"]
