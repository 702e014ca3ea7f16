"""Where quadlet units are installed, by scope. A leaf of its own: `status`, `down` and `doctor` need to
know where units live without loading the renderer (its templates, the recipe model)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

Scope = Literal["system", "user"]
SYSTEM_UNIT_DIR = Path("/etc/containers/systemd")
USER_UNIT_SUBDIR = Path("containers/systemd")  # under $XDG_CONFIG_HOME (default ~/.config)


def install_dir(scope: Scope, *, config_home: Path | None = None) -> Path:
    """Where quadlet looks for units: system /etc/containers/systemd/, user
    $XDG_CONFIG_HOME/containers/systemd/ (~/.config/... when unset)."""
    if scope == "system":
        return SYSTEM_UNIT_DIR
    if config_home is None:
        config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config_home / USER_UNIT_SUBDIR


def install_path(scope: Scope, name: str, *, config_home: Path | None = None) -> Path:
    return install_dir(scope, config_home=config_home) / name
