"""What each podman version understands, as far as rendering is concerned.

Two versions matter and they can differ: the quadlet generator that reads the ``.container`` file
(its keys) and the podman that runs the container (its ``podman run`` flags). On Debian 12, podman
4.3.1 has no quadlet at all, and quadlet 5.4.2 from trixie can drive it; the unit must then use
only flags that 4.3.1 accepts.
"""

from __future__ import annotations

import re

from rigctl.render.escape import RenderError

Version = tuple[int, int]

# Quadlet keys by the podman release that introduced them (facts.md, "Quadlet key availability").
QUADLET_KEYS: dict[str, Version] = {
    "Image": (4, 4), "Exec": (4, 4), "Environment": (4, 4), "Volume": (4, 4), "PublishPort": (4, 4),
    "ContainerName": (4, 4), "Label": (4, 4), "AddDevice": (4, 4), "PodmanArgs": (4, 4),
    "Notify": (4, 4), "RunInit": (4, 4),
    "HealthCmd": (4, 5), "HealthInterval": (4, 5), "HealthTimeout": (4, 5), "HealthStartPeriod": (4, 5),
    "HealthRetries": (4, 5), "HealthOnFailure": (4, 5), "Secret": (4, 5),
    "ShmSize": (4, 7),
    "StopTimeout": (5, 0), "Entrypoint": (5, 0),
}
QUADLET_FIRST: Version = (4, 4)
NOTIFY_HEALTHY: Version = (5, 0)  # both quadlet's Notify=healthy and podman's --sdnotify=healthy
# Oldest podman whose `podman run` has every flag a rendered unit may use (--health-on-failure is 4.3).
PODMAN_FLOOR: Version = (4, 3)
# podman before this leaves the --cidfile behind on `podman rm --cidfile`, and the next start of a
# quadlet unit then fails on the stale %t/%N.cid (seen with 4.3.1 on Debian 12).
CIDFILE_CLEANED: Version = (4, 4)
DEFAULT_PODMAN: Version = (5, 4)  # what quadlets/ is rendered for


def parse_version(text: str) -> Version:
    """``5.4``, ``5.4.2`` or ``podman version 4.3.1`` -> (major, minor)."""
    match = re.search(r"(\d+)\.(\d+)(?:\.\d+)?", text)
    if not match or not re.fullmatch(r"(?:podman version )?\d+\.\d+(?:\.\d+)?(?:[-+~][\w.~+-]*)?", text.strip()):
        raise RenderError(f"{text!r} is not a podman version", fix="give it as MAJOR.MINOR, e.g. 5.4")
    return int(match.group(1)), int(match.group(2))


def fmt(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def has_key(quadlet: Version, key: str) -> bool:
    return quadlet >= QUADLET_KEYS[key]
