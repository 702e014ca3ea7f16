"""Where the quadlet generator is: the one place it is looked for. systemd runs the one it finds for a
scope, and that binary, not podman's version, decides which unit keys are understood. No pydantic here:
``host.early`` asks it for its version before the models load."""

from __future__ import annotations

import os
from dataclasses import dataclass

from rigctl.places import Scope
from rigctl.util.proc import Started

QUADLET_ENV = "RIGCTL_QUADLET"  # an explicit quadlet binary, for every scope (the testbed sets it)
# Where systemd looks for generators, most specific first (systemd.generator(7)); quadlet installs itself
# there as podman-{system,user}-generator, usually a link to podman's own copy, which comes last.
GENERATOR_DIRS = {
    Scope.SYSTEM: ("/run/systemd/system-generators", "/etc/systemd/system-generators",
                   "/usr/local/lib/systemd/system-generators", "/usr/lib/systemd/system-generators",
                   "/lib/systemd/system-generators"),
    Scope.USER: ("/run/systemd/user-generators", "/etc/systemd/user-generators",
                 "/usr/local/lib/systemd/user-generators", "/usr/lib/systemd/user-generators",
                 "/lib/systemd/user-generators"),
}
PODMAN_QUADLETS = ("/usr/libexec/podman/quadlet", "/usr/lib/podman/quadlet")


def quadlet_candidates(scope: Scope) -> list[str]:
    """Every place the quadlet for ``scope`` may be, in the order they are tried."""
    override = os.environ.get(QUADLET_ENV, "")
    generators = [f"{d}/podman-{scope.value}-generator" for d in GENERATOR_DIRS[scope]]
    return [*([override] if override else []), *generators, *PODMAN_QUADLETS]


def find_quadlet(scope: Scope) -> str | None:
    """The quadlet binary systemd runs for ``scope``: it decides which unit keys are understood, and it
    may be newer than podman itself (Debian 12's podman 4.3 has none; a newer one can drive it)."""
    return next((c for c in quadlet_candidates(scope) if os.access(c, os.X_OK)), None)


def other_generator(scope: Scope) -> str | None:
    """The other manager's quadlet generator: asked where ``scope``'s has none, so that root on a box whose
    only manager is a `systemd --user` one (a container, a CI runner) is told to use that scope instead of
    being told that there is no generator at all."""
    return find_quadlet(Scope(scope).other)


@dataclass(frozen=True)
class QuadletAsked:
    """The quadlet generator of ``scope`` (None: there is none) and its ``-version``, already running, for
    ``probes.probe_podman`` to collect."""

    scope: Scope
    path: str | None
    version: Started | None

    def cancel(self) -> None:
        if self.version is not None:
            self.version.cancel()


def ask_version(scope: Scope) -> QuadletAsked:
    """Find the quadlet for ``scope`` and start ``quadlet -version`` (a Go binary: tens of milliseconds)."""
    path = find_quadlet(scope)
    return QuadletAsked(scope, path, Started([path, "-version"], timeout=10.0) if path else None)
