"""``fleet doctor``'s script, and what it ships back from a host without rigctl: the unit files of the
system's and the login's own directories (never another user's home), CDI specs and the driver version,
one ssh call, audited here with the same core. Where rigctl is installed the script runs its doctor instead."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable

from rigctl.fleet.ssh import remote_command
from rigctl.host.cdi import CDI_DIRS, DRIVER_VERSION_FILE
from rigctl.host.unitdirs import SERVICE_HINT, USERS_DIR, Root, default_roots, uid_dirs
from rigctl.host.unitsnapshot import SKIP_DIRS, Skipped
from rigctl.util import safefs

# The directories the snapshot walks are default_roots' own, evaluated with these stand-ins, each of
# which the shell replaces with the remote login's value (``_shell_word``); ``snapshot_roots`` turns
# what the script reports back into the same list, so the two sides cannot disagree about a directory.
# (The uid must be a number: one no login has, whose digits no literal directory holds.)
_HOME, _CONFIG, _DATA, _RUNTIME, _UID = "@HOME@", "@CONFIG@", "@DATA@", "@RUNTIME@", 4_123_456_789
_REMOTE_VALUES = {
    _HOME: '"$HOME"',
    _CONFIG: '"${XDG_CONFIG_HOME:-$HOME/.config}"',  # empty counts as unset, as in default_roots
    _DATA: '"${XDG_DATA_HOME:-$HOME/.local/share}"',
    _RUNTIME: '"$XDG_RUNTIME_DIR"',  # only inside ${XDG_RUNTIME_DIR:+...}: no runtime root without one
    str(_UID): '"$(id -u)"',
}
_STAND_IN = re.compile("(" + "|".join(re.escape(s) for s in _REMOTE_VALUES) + ")")
# Other users' homes are not walked by the snapshot: a shell cannot read a directory its owner may
# change under it without being led, by a link or a name with a newline, to a file root can read. The
# local doctor of a rigctl installed on the host reads them through safefs (no link followed out).
OTHER_HOMES_NOTE = ("other users' homes are audited only where rigctl is installed (this snapshot, taken as "
                    "root without rigctl on the host, read the system's and the login's own unit directories)")
LINK_NOT_READ = "a link: not followed by the snapshot of a host without rigctl (install rigctl there to audit it)"


def _shell_word(path: str) -> str:
    """``path`` (a Root's, with stand-ins) as one shell word: stand-ins become the remote values, the
    rest is quoted; a runtime path is no word at all when XDG_RUNTIME_DIR is unset or empty."""
    pieces = _STAND_IN.split(path)  # literal, stand-in, literal, ...
    word = "".join(_REMOTE_VALUES[p] if i % 2 else shlex.quote(p) for i, p in enumerate(pieces) if p)
    return f"${{XDG_RUNTIME_DIR:+{word}}}" if _RUNTIME in path else word


def _walk_roots(find: str) -> str:
    """The shell line that lists the unit files of default_roots for the login: the system's directories
    and its own (owned by root or by the login), followed through links as quadlet does; one inside
    another is walked only once. No other user's home (OTHER_HOMES_NOTE)."""
    own = [r.path for r in default_roots(_HOME, _RUNTIME, _UID, config=_CONFIG, data=_DATA)]
    own = [p for p in own if not any(p.startswith(q + "/") for q in own)]
    return f"for d in {' '.join(_shell_word(p) for p in own)}; do [ -d \"$d\" ] && find -L \"$d\" {find}; done"


def snapshot_meta(sections: dict[str, str]) -> dict[str, str]:
    """What the snapshot script reported about the login (``meta NAME`` sections)."""
    return {k[len("meta ") :]: v.strip() for k, v in sections.items() if k.startswith("meta ")}


def snapshot_roots(sections: dict[str, str], files: Iterable[str] = ()) -> list[Root]:
    """The directories a snapshot came from: default_roots with the values its script reported; as root,
    each /etc/containers/systemd/users/UID among ``files`` too, as that uid's (their home is not known)."""
    meta = {k: _one_slash(v) for k, v in snapshot_meta(sections).items()}  # as the shipped paths are spelled
    uid = int(meta["uid"]) if meta.get("uid", "").isdigit() else -1
    others = {n: f"{USERS_DIR}/{n}" for n in uid_dirs(files)} if uid == 0 else None
    return default_roots(meta.get("home") or "/root", meta.get("runtime") or None, uid,
                         config=meta.get("config") or None, data=meta.get("data") or None, other_uids=others)


SNAPSHOT_FILES = 5000  # unit files and drop-ins a host without rigctl ships at most (and rigctl takes)


def doctor_script(boundary: str, program: str, *, fix: bool = False) -> str:
    b = boundary
    doctor = [program, "doctor", *(["--fix"] if fix else []), "--json"]
    hint = SERVICE_HINT.pattern
    cdi = " ".join(f"{d}/*.yaml {d}/*.yml {d}/*.json" for d in CDI_DIRS)
    # a path with a newline in it is pruned ($nl is the pattern *<newline>*): `read` would take it for
    # several paths, the second one anything its author chose
    skip = " -o ".join(f"-name '*{d}'" for d in SKIP_DIRS)  # the directories the local snapshot skips
    find = (
        f"\\( -path \"$nl\" -prune \\) -o \\( {skip} \\) -prune -o -type f "
        "\\( -name '*.container' -o -name '*.service' -o -path '*.d/*.conf' \\) -print 2>/dev/null"
    )
    # each file: at most UNIT_LIMIT + 1 bytes (more means "too large", decided here on this side); names
    # and values go through printf, as dash's echo reads a backslash in them as an escape
    ship = f"printf '%s\\n' '{b} file '\"$f\"; head -c {safefs.UNIT_LIMIT + 1} -- \"$f\"; echo"
    # a listed file that is a link is not read; a quadlet unit or drop-in is named as not read, systemd's
    # files silently (its aliases are links; their targets are read where they are)
    link = (f"[ -L \"$f\" ] && {{ case \"$f\" in *.container|*container.d/*.conf) "
            f"printf '%s\\n' '{b} link '\"$f\";; esac; continue; }}")
    return "\n".join([
        f"if {remote_command(['command', '-v', program])} >/dev/null 2>&1; then echo '{b} via rigctl'; "
        f"{remote_command(doctor)}; rc=$?; echo; echo '{b} rc '\"$rc\"; exit 0; fi",
        f"echo '{b} via ssh'",
        f"echo '{b} meta home'; printf '%s\\n' \"$HOME\"",
        f"echo '{b} meta uid'; id -u",
        f"echo '{b} meta runtime'; printf '%s\\n' \"${{XDG_RUNTIME_DIR:-}}\"",
        f"echo '{b} meta config'; printf '%s\\n' \"${{XDG_CONFIG_HOME:-}}\"",
        f"echo '{b} meta data'; printf '%s\\n' \"${{XDG_DATA_HOME:-}}\"",
        "nl=$(printf '*\\n*')",
        "{ " + _walk_roots(find) + "; "
        "} | { n=0; while IFS= read -r f; do "
        f"{link}; "
        f"case \"$f\" in *.service) grep -q -i -E {shlex.quote(hint)} -- \"$f\" 2>/dev/null || continue;; esac; "
        f"n=$((n+1)); if [ \"$n\" -gt {SNAPSHOT_FILES} ]; then echo '{b} too many'; break; fi; "
        f"{ship}; done; }}",
        f"for f in {DRIVER_VERSION_FILE} {cdi}; do [ -f \"$f\" ] && {{ {ship}; }}; done",
        f"echo '{b} end'",
    ])


def _plain_path(path: str) -> bool:
    """Whether a shipped path is absolute and spelled as it normalises: no ``..`` nor ``.`` in it, so it
    is under the root it names (a path that leaves its root is refused, never audited or patched)."""
    return path.startswith("/") and posixpath.normpath(path) == path and not path.startswith("//")


PATH_REFUSED = "its path leaves its directory ('..' or '.' in it): refused, neither audited nor patched"


def snapshot_files(sections: dict[str, str]) -> tuple[dict[str, str], list[Skipped]]:
    """The files a snapshot shipped back, and those it did not take: too large (the script sends one byte
    more than the limit of any file that has more), a link, or a path that is not plain (PATH_REFUSED:
    a host's failure)."""
    files: dict[str, str] = {}
    skipped: list[Skipped] = []
    for key, body in sections.items():
        if key.startswith(("file ", "link ")) and not _plain_path(_one_slash(key[len("file ") :])):
            skipped.append(Skipped(_one_slash(key[len("file ") :]), PATH_REFUSED))
            continue
        if key.startswith("file "):
            path = _one_slash(key[len("file ") :])
            # the script adds a newline after each file; splitting on lines already dropped it
            if len(body.encode()) > safefs.UNIT_LIMIT:
                skipped.append(Skipped(path, f"more than the {safefs.format_size(safefs.UNIT_LIMIT)} "
                                             "rigctl reads from such a file"))
            else:
                files[path] = body
        elif key.startswith("link "):
            skipped.append(Skipped(_one_slash(key[len("link ") :]), LINK_NOT_READ))
    return files, skipped


def _one_slash(path: str) -> str:
    """A shipped path as the roots spell it: find prints "$HOME"/.config with $HOME's trailing slash."""
    return re.sub("/{2,}", "/", path)
