#!/usr/bin/env python3
"""Run uv, fetching it from PyPI first where it is missing: the README's first command on any Python 3.8+.

A distribution's own Python (Debian 12 and 13, Ubuntu 24.04: PEP 668 "externally managed") refuses
``pip install uv``, often has no pip and no venv module at all, and should not be changed. uv needs none of
them: it is one static binary, published on PyPI inside a wheel. So this script, with the standard library
alone, uses ``uv`` from PATH when there is one, else the copy it keeps in ``$XDG_CACHE_HOME/rigctl/uv-VERSION``,
else downloads that version's wheel for this machine from PyPI (or ``$RIGCTL_PYPI``, a mirror with PyPI's JSON
API), checks the wheel's sha256 against the index's, and takes the binary out of it. Then it runs uv with the
arguments given, in place of this process.

    python3 tools/uv.py run --no-dev rigctl up glm53-flash --dry-run
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shutil
import stat
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile

VERSION = "0.13.9"  # the uv this project's lock file was made with
INDEX = os.environ.get("RIGCTL_PYPI", "https://pypi.org").rstrip("/")
MAX_WHEEL = 200 << 20  # uv's wheels are about 20 MB; a bigger answer is not one
TIMEOUT_S = 120


def say(text: str) -> None:
    sys.stderr.write(f"tools/uv.py: {text}\n")
    sys.stderr.flush()


def wheel_prefixes() -> list[str]:
    """The start of the platform tags of uv's wheels that run here (``manylinux_2_17_x86_64``...), best first."""
    machine = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    system = platform.system()
    if system == "Linux":
        kinds = ["manylinux_", "musllinux_"] if platform.libc_ver()[0] == "glibc" else ["musllinux_"]
        return [f"{kind}{arch}" for kind in kinds]
    if system == "Darwin":
        return ["macosx_" + ("arm64" if arch == "aarch64" else "x86_64")]
    raise SystemExit(f"tools/uv.py: no uv wheel for {system} {machine}; install uv yourself: https://docs.astral.sh/uv/")


def _tags(filename: str) -> list[str]:
    """The platform tags of a wheel's file name, each without its version part: ``manylinux_x86_64``."""
    platforms = filename.removesuffix(".whl").split("-")[-1]
    out = []
    for tag in platforms.split("."):
        head, *rest = tag.split("_")
        while rest and rest[0].isdigit():  # the glibc/musl/macOS version
            rest.pop(0)
        out.append("_".join([head, *rest]))
    return out


def pick(files: list[dict[str, object]]) -> dict[str, object]:
    wanted = wheel_prefixes()
    for prefix in wanted:
        for entry in files:
            name = str(entry.get("filename", ""))
            if name.endswith(".whl") and prefix in _tags(name):
                return entry
    raise SystemExit(f"tools/uv.py: PyPI lists no uv {VERSION} wheel for {' or '.join(wanted)}")


def fetch(url: str, limit: int) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:
            data: bytes = answer.read(limit + 1)
    except OSError as exc:  # URLError and HTTPError are OSErrors
        raise SystemExit(f"tools/uv.py: {url}: {exc}; install uv yourself (https://docs.astral.sh/uv/), "
                         "or set RIGCTL_PYPI to a PyPI mirror") from None
    if len(data) > limit:
        raise SystemExit(f"tools/uv.py: {url}: more than {limit >> 20} MB, not a uv wheel")
    return data


def download(target: str) -> None:
    page = f"{INDEX}/pypi/uv/json"  # every index serves this one
    meta = json.loads(fetch(page, 64 << 20))
    entry = pick(list(meta.get("releases", {}).get(VERSION, [])))
    url, digest = urllib.parse.urljoin(page, str(entry["url"])), dict(entry.get("digests", {})).get("sha256")  # type: ignore[call-overload]
    say(f"fetching uv {VERSION} from {INDEX} ({entry['filename']})")
    data = fetch(url, MAX_WHEEL)
    got = hashlib.sha256(data).hexdigest()
    if not digest or got != digest:
        raise SystemExit(f"tools/uv.py: {entry['filename']}: sha256 {got} is not the index's {digest}")
    with zipfile.ZipFile(io.BytesIO(data)) as wheel:
        member = next((n for n in wheel.namelist() if n.endswith(".data/scripts/uv")), None)
        if member is None:
            raise SystemExit(f"tools/uv.py: {entry['filename']} holds no uv binary")
        binary = wheel.read(member)
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".uv-")
    with os.fdopen(fd, "wb") as out:
        out.write(binary)
    os.chmod(tmp, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    os.replace(tmp, target)


def cached_path() -> str:
    home = os.environ.get("HOME") or os.path.expanduser("~")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(cache, "rigctl", f"uv-{VERSION}", "uv")


def main(argv: list[str]) -> None:
    found = shutil.which("uv")
    if found is None:
        found = cached_path()
        if not os.access(found, os.X_OK):
            download(found)
    os.execv(found, [found, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
