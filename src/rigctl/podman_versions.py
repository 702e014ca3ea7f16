"""What each podman release understands: quadlet keys and `podman run` behaviour by version.

A leaf module: preflight (which judges the installed podman) and render (which writes only what the
target understands) both read this one table. Facts from facts.md, "Quadlet key availability".
"""

from __future__ import annotations

import re

Version = tuple[int, int]

# Quadlet keys by the podman release that introduced them (facts.md, "Quadlet key availability").
QUADLET_KEYS: dict[str, Version] = {
    "Image": (4, 4), "Exec": (4, 4), "Environment": (4, 4), "Volume": (4, 4), "PublishPort": (4, 4),
    "ContainerName": (4, 4), "Label": (4, 4), "AddDevice": (4, 4), "PodmanArgs": (4, 4),
    "Notify": (4, 4), "RunInit": (4, 4),
    "HealthCmd": (4, 5), "HealthInterval": (4, 5), "HealthTimeout": (4, 5), "HealthStartPeriod": (4, 5),
    "HealthRetries": (4, 5), "HealthOnFailure": (4, 5), "Secret": (4, 5),
    "HealthStartupCmd": (4, 5), "HealthStartupInterval": (4, 5), "HealthStartupTimeout": (4, 5),
    "HealthStartupSuccess": (4, 5),
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


def fmt(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def has_key(quadlet: Version, key: str) -> bool:
    return quadlet >= QUADLET_KEYS[key]


def find_version(text: str | None) -> Version | None:
    """The first MAJOR.MINOR in ``text`` (``podman version 4.3.1`` -> (4, 3)), or None."""
    # whole numbers of at most 6 digits: the text may come from another box, and int() refuses (or
    # crawls through) thousands of digits
    match = re.search(r"(?<!\d)(\d{1,6})\.(\d{1,6})(?!\d)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None
