"""Gather the host facts once (probes in parallel threads), or load a captured inventory."""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import socket
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from rigctl.errors import InvalidInputError
from rigctl.host import probes
from rigctl.host.facts import (
    FACTS_SCHEMA,
    Cdi,
    GpuInventory,
    HostFacts,
    PathProbe,
    Podman,
    Ports,
    Shm,
    Systemd,
)
from rigctl.host.licenses import read_acceptances
from rigctl.host.nvml import NvmlLib, probe_gpus
from rigctl.recipe.model import Recipe, SpecDraft

T = TypeVar("T")


def default_cache_dirs() -> list[str]:
    """Where models and rigctl's own caches usually live: their free space is worth knowing."""
    home = Path.home()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(home / ".cache")
    hf = os.environ.get("HF_HOME") or str(Path(xdg) / "huggingface")
    return [hf, str(Path(xdg) / "rigctl")]


def gather_facts(
    paths: Iterable[str] = (),
    *,
    nvml: NvmlLib | None = None,
    include_cache_dirs: bool = True,
    podman_sockets: list[str] | None = None,
    cdi_dirs: tuple[str, ...] = probes.CDI_DIRS,
) -> HostFacts:
    """Probe this host. ``paths`` are the paths a recipe needs (checkpoint and draft directories).
    Each section is isolated: a probe that crashes leaves its default and an entry in probe_errors."""
    wanted = list(dict.fromkeys([*paths, *(default_cache_dirs() if include_cache_dirs else [])]))
    errors: dict[str, str] = {}

    def guarded(section: str, fut: Future[T], default: Callable[[], T]) -> T:
        try:
            return fut.result()
        except Exception as exc:  # a probe bug must not take the inventory down; it is reported instead
            errors[section] = f"{type(exc).__name__}: {exc}"
            return default()

    with ThreadPoolExecutor(max_workers=6, thread_name_prefix="rigctl-probe") as pool:
        f_gpu = pool.submit(probe_gpus, nvml)
        f_podman = pool.submit(probes.probe_podman, podman_sockets)
        f_ports = pool.submit(probes.probe_ports)
        f_shm = pool.submit(probes.probe_shm)
        f_paths = [pool.submit(probes.probe_path, p) for p in wanted]
        f_systemd = pool.submit(probes.probe_systemd)
        gpu = guarded("gpu", f_gpu, lambda: GpuInventory(available=False, error="probe crashed"))
        # the CDI probe needs the driver version to find the driver's install time
        f_cdi = pool.submit(probes.probe_cdi, gpu.driver_version, cdi_dirs)
        path_facts = [guarded(f"path {p}", f, functools.partial(PathProbe, path=p, exists=False,
                                                                 error="probe crashed"))
                      for p, f in zip(wanted, f_paths, strict=True)]
        facts = HostFacts(
            hostname=socket.gethostname(),
            captured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            cpu_count=os.cpu_count(),
            gpu=gpu,
            shm=guarded("shm", f_shm, Shm),
            paths=path_facts,
            podman=guarded("podman", f_podman, lambda: Podman(installed=False)),
            cdi=guarded("cdi", f_cdi, Cdi),
            systemd=guarded("systemd", f_systemd, lambda: Systemd(system_manager=False, user_manager=False)),
            ports=guarded("ports", f_ports, Ports),
        )
    records, problem = read_acceptances()
    if problem:
        errors["licenses"] = problem
    return facts.model_copy(update={"licenses": records, "probe_errors": errors})


def facts_from_json(data: Any, source: str) -> HostFacts:
    """A HostFacts document, or the ``rigctl inventory --json`` envelope around one."""
    if not isinstance(data, dict):
        raise InvalidInputError([f"{source}: not an inventory (the top level must be a JSON object)"])
    body = dict(data)
    if body.get("command") == "inventory":
        body.pop("command", None)
        body.pop("ok", None)
    version = body.get("rigctl")
    if version != FACTS_SCHEMA:
        raise InvalidInputError(
            [f"{source}: rigctl: inventory schema {version!r} is not supported (this rigctl reads {FACTS_SCHEMA!r})"],
            fix="capture it again with this rigctl: `rigctl inventory --json > FILE`",
        )
    try:
        return HostFacts.model_validate(body)
    except ValidationError as exc:
        problems = [f"{source}: {'.'.join(str(x) for x in e['loc']) or '(top level)'}: {e['msg']}"
                    for e in exc.errors(include_url=False)]
        raise InvalidInputError(problems, fix="capture it again: `rigctl inventory --json > FILE`") from None


def load_inventory(path: str | Path) -> HostFacts:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError([f"{p}: cannot read: {exc.strerror}"]) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidInputError([f"{p}: not JSON: {exc}"],
                                fix="capture it with `rigctl inventory --json > FILE`") from None
    return facts_from_json(data, str(p))


def facts_for_recipe(recipe: Recipe, inventory: str | Path | None = None) -> HostFacts:
    """The facts a recipe's preflight needs: a captured inventory replayed (licence acceptances recorded
    on this machine count too), or this host gathered with the recipe's checkpoint paths probed."""
    if inventory is not None:
        return load_inventory(inventory).with_licenses(read_acceptances()[0])
    paths = [recipe.checkpoint.path]
    if isinstance(recipe.speculative, SpecDraft):
        paths.append(recipe.speculative.draft.path)
    return gather_facts(paths)
