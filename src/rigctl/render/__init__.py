"""Rendering recipes into podman quadlet units (pure; golden-tested against quadlets/)."""

from rigctl.render.escape import RenderError
from rigctl.render.units import (
    Note,
    RenderedUnits,
    Scope,
    UnitFile,
    install_dir,
    install_path,
    render_units,
    write_units,
)
from rigctl.render.versions import DEFAULT_PODMAN, Version, parse_version

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
    "write_units",
]
