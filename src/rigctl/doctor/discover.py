"""Which directories the doctor audits: the ones quadlet and systemd read for this login and, as root,
every other user's home and /etc/containers/systemd/users/UID too (``local_roots``), or the files and
directories named with ``--path`` (``path_roots``). Reading them and finding each unit with its drop-ins is
``rigctl.host.unitdirs`` and ``rigctl.host.unitsnapshot``'s, the loader ``rigctl status`` uses too.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable
from pathlib import Path

from rigctl.host.unitdirs import USERS_DIR, Root, uid_of
from rigctl.host.unitsnapshot import login_roots
from rigctl.invocation import current

MAX_USERS = 4096  # a bound on the listing, far above any workstation's logins


def path_roots(paths: Iterable[str]) -> list[Root]:
    """``--path`` arguments: each a realm of its own (a file or a directory), whose owner is the owner of
    the directory opened. The snapshot opens each without following a link another uid could have
    placed (``safefs.open_given``) and keeps it open for ``--fix``."""
    roots = []
    for p in paths:
        path = str(Path(p).absolute())
        roots.append(Root(path, "path", "path", path))
    return roots


def local_roots() -> list[Root]:
    others: list[str] = []
    if current().is_root and Path("/home").is_dir():
        others = sorted(str(p) for p in Path("/home").iterdir() if p.is_dir())
    return login_roots(others, users_dirs(homes=others) if current().is_root else None)


def users_dirs(base: str = USERS_DIR, homes: Iterable[str] = ()) -> dict[int, str]:
    """As root: {uid: whose} for each /etc/containers/systemd/users/UID directory. ``whose`` is that uid's
    home among ``homes`` where the password database names it and the uid owns it, so their units are
    audited beside their home's; else the directory itself: a home like /, /root or /nonexistent is no
    realm to share. A users/UID that is a link is left out (the snapshot names it): where it leads may be
    the user's to change, and root must not follow it to files the user picks."""
    names: list[str] = []
    try:
        with os.scandir(base) as entries:
            for entry in entries:
                if uid_of(entry.name) is not None and entry.is_dir(follow_symlinks=False):
                    names.append(entry.name)
                if len(names) >= MAX_USERS:
                    break
    except OSError:
        return {}
    audited = {h.rstrip("/") for h in homes}
    found: dict[int, str] = {}
    for name in sorted(names, key=int):
        uid, home = int(name), _home_of(int(name))
        found[uid] = home if home in audited and _owned_by(home, uid) else f"{base}/{name}"
    return found


def _home_of(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_dir.rstrip("/")
    except (KeyError, OverflowError):
        return None


def _owned_by(path: str, uid: int) -> bool:
    try:
        return os.stat(path).st_uid == uid  # /home/alice may be root's link to /data/alice
    except OSError:
        return False
