"""What each podman version understands, as far as rendering is concerned.

Two versions matter and they can differ: the quadlet generator that reads the ``.container`` file
(its keys) and the podman that runs the container (its ``podman run`` flags). On Debian 12, podman
4.3.1 has no quadlet at all, and quadlet 5.4.2 from trixie can drive it; the unit must then use
only flags that 4.3.1 accepts.
"""

from __future__ import annotations

import re

from rigctl.podman_versions import (  # re-exported: render's callers import them from here
    CIDFILE_CLEANED,
    DEFAULT_PODMAN,
    NOTIFY_HEALTHY,
    PODMAN_FLOOR,
    QUADLET_FIRST,
    QUADLET_KEYS,
    Version,
    fmt,
    has_key,
)
from rigctl.render.escape import RenderError

__all__ = [
    "CIDFILE_CLEANED",
    "DEFAULT_PODMAN",
    "NOTIFY_HEALTHY",
    "PODMAN_FLOOR",
    "QUADLET_FIRST",
    "QUADLET_KEYS",
    "Version",
    "fmt",
    "has_key",
    "parse_version",
]

def parse_version(text: str) -> Version:
    """``5.4``, ``5.4.2`` or ``podman version 4.3.1`` -> (major, minor)."""
    match = re.search(r"(\d+)\.(\d+)(?:\.\d+)?", text)
    if not match or not re.fullmatch(r"(?:podman version )?\d+\.\d+(?:\.\d+)?(?:[-+~][\w.~+-]*)?", text.strip()):
        raise RenderError(f"{text!r} is not a podman version", fix="give it as MAJOR.MINOR, e.g. 5.4")
    return int(match.group(1)), int(match.group(2))
