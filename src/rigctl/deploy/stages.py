"""The real stages `up` sequences: preflight (host facts + checks), render, verify (smoke + repetition).

Kept apart from ``up.py`` so that the orchestration can be read (and exercised) without the three
modules it borrows from, and so that their interfaces meet deploy's in one place.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from rigctl.deploy.ports import Scope
from rigctl.deploy.up import ChecksOutcome, PreflightOutcome, Stages
from rigctl.host.gather import gather_facts
from rigctl.preflight.layout import unit_gpu_ids
from rigctl.preflight.runner import run_preflight
from rigctl.recipe.model import Recipe
from rigctl.render.units import render_units
from rigctl.render.versions import parse_version
from rigctl.util.proc import run
from rigctl.verify.report import Expectations, endpoint_for
from rigctl.verify.runner import run_checks

# Where systemd looks for generators, most specific first (systemd.generator(7)); quadlet installs
# itself as podman-{system,user}-generator.
_GENERATOR_DIRS = {
    Scope.SYSTEM: ("/run/systemd/system-generators", "/etc/systemd/system-generators",
                   "/usr/local/lib/systemd/system-generators", "/usr/lib/systemd/system-generators",
                   "/lib/systemd/system-generators"),
    Scope.USER: ("/run/systemd/user-generators", "/etc/systemd/user-generators",
                 "/usr/local/lib/systemd/user-generators", "/usr/lib/systemd/user-generators",
                 "/lib/systemd/user-generators"),
}


def generator_quadlet(scope: Scope) -> str | None:
    """The quadlet binary systemd really runs for this scope (it may be newer than podman itself)."""
    name = "podman-user-generator" if scope is Scope.USER else "podman-system-generator"
    for directory in _GENERATOR_DIRS[scope]:
        path = Path(directory) / name
        if os.access(path, os.X_OK):
            return str(path)
    return None


def quadlet_version(scope: Scope) -> str | None:
    binary = generator_quadlet(scope)
    if binary is None:
        return None
    done = run([binary, "-version"], timeout=10.0)
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", done.stdout + done.stderr)
    return match.group(1) if done.ok and match else None


def real_stages(scope: Scope, *, verify: bool = True) -> Stages:
    def preflight(recipe: Recipe, force: Sequence[str], gpus: str | None) -> PreflightOutcome:
        paths = [recipe.checkpoint.path, *[v.host for v in recipe.container.volumes]]
        facts = gather_facts(paths)
        selection = [g.strip() for g in gpus.split(",") if g.strip()] if gpus else None
        report = run_preflight(recipe, facts, force=force, gpus=selection,
                               scope="user" if scope is Scope.USER else "system")
        return PreflightOutcome(
            ok=report.ok,
            findings=[f.model_dump(mode="json") for f in report.findings],
            gpu_ids=unit_gpu_ids(recipe, report.choice),  # what `render` pins too; too few are refused there
            podman_version=facts.podman.version,
        )

    def render(recipe: Recipe, podman_version: str, gpu_ids: list[str] | None) -> dict[str, str]:
        qv = quadlet_version(scope)
        rendered = render_units(
            recipe,
            podman_version=parse_version(podman_version),
            quadlet_version=parse_version(qv) if qv else None,
            gpu_ids=gpu_ids,  # never None for a GPU recipe: an empty choice must not become guessed indices
            scope="user" if scope is Scope.USER else "system",
        )
        return {f.name: f.text for f in rendered.files}

    def checks(recipe: Recipe, endpoint: str) -> ChecksOutcome:
        report = run_checks(endpoint_for(recipe), Expectations.from_recipe(recipe),
                            ("health", "models", "smoke", "repetition"))
        results = [c.to_dict() for c in report.checks]
        lines = [str(c.get("message", "")) for c in results]
        return ChecksOutcome(ok=report.ok, results=results, output_lines=lines)

    return Stages(preflight=preflight, render=render, checks=checks if verify else None)
