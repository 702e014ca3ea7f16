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
from rigctl.util.text import clip

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

# MAJOR.MINOR[.PATCH][-suffix], each number short: int() of thousands of digits is refused (or slow)
_VERSION = re.compile(r"(?:podman version )?(\d{1,6})\.(\d{1,6})(?:\.\d{1,6})?(?:[-+~][\w.~+-]{0,64})?")


def parse_version(text: str) -> Version:
    """``5.4``, ``5.4.2`` or ``podman version 4.3.1`` -> (major, minor)."""
    match = _VERSION.fullmatch(text.strip())
    if not match:
        raise RenderError(f"{clip(text)} is not a podman version", fix="give it as MAJOR.MINOR, e.g. 5.4")
    return int(match.group(1)), int(match.group(2))
