"""Which directories the doctor audits: the ones quadlet and systemd read for this login and, as root,
every other user's home too (``local_roots``), or the files and directories named with ``--path``
(``path_roots``). Reading them and finding each unit with its drop-ins is ``rigctl.host.unitdirs`` and
``rigctl.host.unitsnapshot``'s, the loader ``rigctl status`` uses too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from rigctl.host.unitdirs import Root
from rigctl.host.unitsnapshot import login_roots


def path_roots(paths: Iterable[str]) -> list[Root]:
    """``--path`` arguments: each a realm of its own, trusted as given (a file or a directory)."""
    roots = []
    for p in paths:
        path = str(Path(p).absolute())
        roots.append(Root(path, "path", "path", path))
    return roots


def local_roots() -> list[Root]:
    others: list[str] = []
    if os.getuid() == 0 and Path("/home").is_dir():
        others = sorted(str(p) for p in Path("/home").iterdir() if p.is_dir())
    return login_roots(others)
