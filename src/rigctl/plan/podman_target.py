"""The podman a unit is rendered for, and the quadlet generator that will read it: one rule for `render`,
`up --dry-run`, `up` and `swap`.

Given on the command line (``--podman-version``, ``--quadlet-version``), a version is taken as given (and
must be one). Otherwise it is what the facts found: this host's podman, or a captured inventory's; and a
quadlet generator found there counts only for the manager scope it was found for
(``PodmanFacts.generator_for``). No podman found: the default, said in a note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rigctl.places import Scope
from rigctl.podman_versions import DEFAULT_PODMAN, Version, find_version, fmt
from rigctl.render.escape import RenderError
from rigctl.render.units import Note
from rigctl.util.text import clip

if TYPE_CHECKING:
    from rigctl.host.facts import PodmanFacts

# MAJOR.MINOR[.PATCH][-suffix], each number short: int() of thousands of digits is refused (or slow)
_VERSION = re.compile(r"(?:podman version )?(\d{1,6})\.(\d{1,6})(?:\.\d{1,6})?(?:[-+~][\w.~+-]{0,64})?")


def parse_version(text: str) -> Version:
    """A version the operator typed: ``5.4``, ``5.4.2`` or ``podman version 4.3.1`` -> (major, minor)."""
    match = _VERSION.fullmatch(text.strip())
    if not match:
        raise RenderError(f"{clip(text)} is not a podman version", fix="give it as MAJOR.MINOR, e.g. 5.4")
    return int(match.group(1)), int(match.group(2))


@dataclass(frozen=True)
class PodmanTarget:
    """The podman a unit is rendered for and the quadlet generator that reads it, by the rule `up` plans
    by (``plan.plan``), so that `render` here prints the unit `up` would install here."""

    podman: Version | None  # None: nothing said which (DEFAULT_PODMAN)
    quadlet: Version | None  # None: podman's own
    source: Literal["option", "inventory", "host", "default"]
    note: Note | None = None  # said when the default stands in for a podman that was not found
    elsewhere: tuple[Scope, str] | None = None  # this host: the other scope's generator, where this one has none
    quadlet_path: str | None = None  # the generator binary the facts found for the scope: asked when it rejects a unit


def podman_target(
    podman_version: str | None, quadlet_version: str | None, podman: PodmanFacts | None, *, where: str, scope: Scope,
) -> PodmanTarget:
    """--podman-version (and --quadlet-version) as given; else the podman that ``podman`` (an inventory's or
    this host's facts) found, with the generator found for ``scope``; else the default, said in a note."""
    quadlet = parse_version(quadlet_version) if quadlet_version else None
    if podman_version:
        return PodmanTarget(parse_version(podman_version), quadlet, "option")
    if podman is None:
        return PodmanTarget(None, quadlet, "default")
    source: Literal["inventory", "host"] = "host" if where == "this host" else "inventory"
    counts = podman.generator_for(scope)
    path = podman.quadlet if counts else None
    if quadlet is None and counts:
        quadlet = find_version(podman.quadlet_version)
    found = find_version(podman.version) if podman.installed else None
    if found is None:
        return PodmanTarget(None, quadlet, source, Note("info", (
            f"podman not found on {where}: the unit is rendered for podman {fmt(DEFAULT_PODMAN)}; --podman-version "
            "X.Y renders for another")), quadlet_path=path)
    elsewhere = podman.generator_elsewhere(scope) if source == "host" else None  # a capture's box: not here
    return PodmanTarget(found, quadlet, source, elsewhere=elsewhere, quadlet_path=path)
