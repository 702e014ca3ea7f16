"""Host facts: gathered once at the edge (``gather_facts``) or replayed from a capture
(``load_inventory``). Nothing above this layer reads the host.

The names below load on first use (PEP 562): importing a light module of this package
(``rigctl.host.early``) must not load pydantic and every facts model with it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rigctl.host.facts import FACTS_SCHEMA, HostFacts
    from rigctl.host.gather import facts_for_recipe, gather_facts, load_inventory

__all__ = ["FACTS_SCHEMA", "HostFacts", "facts_for_recipe", "gather_facts", "load_inventory"]
_HOME = {"FACTS_SCHEMA": "facts", "HostFacts": "facts", "facts_for_recipe": "gather", "gather_facts": "gather",
         "load_inventory": "gather"}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"rigctl.host.{module}"), name)
