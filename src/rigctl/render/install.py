"""Where quadlet units are installed, by scope: ``rigctl.places`` holds it (with the state and lock
directories); the renderer's callers keep importing it from here. A leaf of its own: `status`, `down` and
`doctor` need to know where units live without loading the renderer (its templates, the recipe model)."""

from __future__ import annotations

from rigctl.places import SYSTEM_UNIT_DIR, USER_UNIT_SUBDIR, Scope, install_dir, install_path

__all__ = ["SYSTEM_UNIT_DIR", "USER_UNIT_SUBDIR", "Scope", "install_dir", "install_path"]
