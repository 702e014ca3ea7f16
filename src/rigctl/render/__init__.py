"""Rendering recipes into podman quadlet units (pure; golden-tested against quadlets/).

The names below load on first use: ``rigctl.render.install`` (where units live) is imported by commands
that never render, and must not bring the templates and the recipe model along through this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rigctl.render.escape import RenderError
    from rigctl.render.install import Scope, install_dir, install_path
    from rigctl.render.units import Note, RenderedUnits, UnitFile, render_units, write_files
    from rigctl.render.versions import DEFAULT_PODMAN, Version, parse_version

_HOMES = {
    "RenderError": "escape",
    "Scope": "install", "install_dir": "install", "install_path": "install",
    "Note": "units", "RenderedUnits": "units", "UnitFile": "units", "render_units": "units", "write_files": "units",
    "DEFAULT_PODMAN": "versions", "Version": "versions", "parse_version": "versions",
}

__all__ = [
    "DEFAULT_PODMAN",
    "Note",
    "RenderError",
    "RenderedUnits",
    "Scope",
    "UnitFile",
    "Version",
    "install_dir",
    "install_path",
    "parse_version",
    "render_units",
    "write_files",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"rigctl.render.{home}"), name)
