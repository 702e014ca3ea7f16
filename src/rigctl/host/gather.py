"""Gather the host facts once (probes in parallel threads), or load a captured inventory."""

from __future__ import annotations

import datetime as dt
import functools
import os
import socket
import threading
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from rigctl.errors import InvalidInputError
from rigctl.host import probes
from rigctl.host.cdi import CDI_DIRS
from rigctl.host.early import EarlyProbes
from rigctl.host.facts import (
    FACTS_SCHEMA,
    Cdi,
    GpuInventory,
    HostFacts,
    PathProbe,
    PodmanFacts,
    Ports,
    Shm,
    StackFacts,
    SystemdFacts,
    facts_body,
)
from rigctl.host.licenses import read_acceptances
from rigctl.host.nvml import probe_gpus
from rigctl.host.nvml_lib import NvmlLib
from rigctl.host.receipts import read_receipts
from rigctl.host.stack import probe_stack
from rigctl.invocation import current
from rigctl.places import Scope
from rigctl.recipe.model import Recipe, SpecDraft
from rigctl.recipe.problems import format_validation_error
from rigctl.util.jsonfile import load_json
from rigctl.util.safefs import INVENTORY_LIMIT
from rigctl.util.text import clip

T = TypeVar("T")

CAPTURE_FIX = "capture it again with this rigctl: `rigctl inventory --json > FILE`"
MAX_PROBLEMS = 20  # a document with thousands of bad entries needs the first few named, not all


def default_cache_dirs() -> list[str]:
    """Where models and rigctl's own caches usually live: their free space is worth knowing."""
    xdg = current().cache_home
    hf = os.environ.get("HF_HOME") or str(xdg / "huggingface")
    return [hf, str(xdg / "rigctl")]


class _Probe(threading.Thread, Generic[T]):
    """One probe on a thread of its own, started at once; ``result`` waits for it and returns its value or
    raises what it raised. (concurrent.futures would do, and cost its import and logging's on every run.)"""

    def __init__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> None:
        super().__init__(name="rigctl-probe")
        self._call = functools.partial(fn, *args, **kwargs)
        self._value: T | None = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as exc:  # handed to the caller of result(), which decides what to catch
            self._error = exc

    def result(self) -> T:
        self.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value] # set by run() when it did not raise


def gather_facts(
    paths: Iterable[str] = (),
    *,
    nvml: NvmlLib | None = None,
    include_cache_dirs: bool = True,
    podman_sockets: list[str] | None = None,
    cdi_dirs: tuple[str, ...] = CDI_DIRS,
    early: EarlyProbes | None = None,
    owners_of: Collection[int] | None = None,
    scope: Scope | None = None,
) -> HostFacts:
    """Probe this host. ``paths`` are the paths a recipe needs (``recipe_paths``); ``scope`` the service
    manager a unit would go to (its quadlet generator is looked up; default: root's system, else user).
    Each section is isolated: a probe that crashes leaves its default and an entry in probe_errors.
    ``early``: the podman calls and NVML's start, begun by the caller (``early.probes_started``); the
    caller cancels them. ``owners_of``: the ports whose holding processes are looked up (None: all)."""
    wanted = list(dict.fromkeys([*paths, *(default_cache_dirs() if include_cache_dirs else [])]))
    errors: dict[str, str] = {}

    def guarded(section: str, probe: _Probe[T], default: Callable[[], T]) -> T:
        try:
            return probe.result()
        except Exception as exc:  # a probe bug must not take the inventory down; it is reported instead
            errors[section] = f"{type(exc).__name__}: {exc}"
            return default()

    f_gpu = _Probe(_probe_gpus, nvml, early)
    f_podman = _Probe(probes.probe_podman, podman_sockets, started=early and early.podman, scope=scope,
                      quadlet=early and early.quadlet)
    f_ports = _Probe(probes.probe_ports, owners_of=owners_of)
    f_shm = _Probe(probes.probe_shm)
    f_paths = [_Probe(probes.probe_path, p) for p in wanted]
    f_systemd = _Probe(probes.probe_systemd)
    gpu = guarded("gpu", f_gpu, lambda: GpuInventory(available=False, error="probe crashed"))
    # the CDI probe needs the driver version to find the driver's install time
    f_cdi = _Probe(probes.probe_cdi, gpu.driver_version, cdi_dirs)
    f_stack = _Probe(probe_stack, gpu)  # the GPUs' bus ids say whose PCIe path to read
    path_facts = [guarded(f"path {p}", f, functools.partial(PathProbe, path=p, exists=False, error="probe crashed"))
                  for p, f in zip(wanted, f_paths, strict=True)]
    facts = HostFacts(
        hostname=socket.gethostname(),
        captured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        cpu_count=os.cpu_count(),
        gpu=gpu,
        shm=guarded("shm", f_shm, Shm),
        paths=path_facts,
        podman=guarded("podman", f_podman, lambda: PodmanFacts(installed=False)),
        cdi=guarded("cdi", f_cdi, Cdi),
        systemd=guarded("systemd", f_systemd, lambda: SystemdFacts(system_manager=False, user_manager=False)),
        ports=guarded("ports", f_ports, Ports),
        stack=guarded("stack", f_stack, lambda: StackFacts(error="probe crashed")),
    )
    records, problem = read_acceptances()
    if problem:
        errors["licenses"] = problem
    receipts, problem = read_receipts()
    if problem:
        errors["receipts"] = problem
    return facts.model_copy(update={"licenses": records, "receipts": receipts, "probe_errors": errors})


def facts_from_json(data: Any, source: str) -> HostFacts:
    """A HostFacts document, or the ``rigctl inventory --json`` envelope around one."""
    if not isinstance(data, dict):
        raise InvalidInputError([f"{source}: not an inventory (the top level must be a JSON object)"])
    body, problem = facts_body(data)  # the `inventory --json` envelope's head (command, ok, version) set aside
    if problem is not None:
        raise InvalidInputError([f"{source}: {problem}"], fix=CAPTURE_FIX)
    version = body.get("rigctl")
    if version != FACTS_SCHEMA:
        shown = clip(version) if isinstance(version, str) else f"{version!r:.80}"
        raise InvalidInputError(
            [f"{source}: rigctl: inventory schema {shown} is not supported (this rigctl reads {FACTS_SCHEMA!r})"],
            fix=CAPTURE_FIX,
        )
    try:
        return HostFacts.model_validate(body)
    except ValidationError as exc:
        problems = format_validation_error(source, exc, model=HostFacts, most=MAX_PROBLEMS)
        raise InvalidInputError(problems, fix=CAPTURE_FIX) from None


def load_inventory(path: str | Path) -> HostFacts:
    """A captured inventory: bounded (a FIFO or /dev/zero is refused, not read), strict UTF-8 JSON of
    bounded nesting, then the facts model (which refuses impossible values)."""
    data = load_json(path, limit=INVENTORY_LIMIT, fix=CAPTURE_FIX)
    return facts_from_json(data, str(path))


def refresh_facts(facts: HostFacts, *, owners_of: Collection[int] | None = None) -> HostFacts:
    """``facts`` with what a stopped service changes probed again (the GPUs through NVML, the listening
    ports) and the rest kept: podman, its images, CDI, systemd and the paths do not change when a unit stops."""
    f_gpu = _Probe(_probe_gpus, None, None)
    f_ports = _Probe(probes.probe_ports, owners_of=owners_of)
    errors = {k: v for k, v in facts.probe_errors.items() if k not in ("gpu", "ports")}
    update: dict[str, Any] = {}
    for section, probe in (("gpu", f_gpu), ("ports", f_ports)):
        try:
            update[section] = probe.result()
        except Exception as exc:  # as in gather_facts: reported, the old section kept
            errors[section] = f"{type(exc).__name__}: {exc}"
    return facts.model_copy(update={**update, "probe_errors": errors})


def _probe_gpus(nvml: NvmlLib | None, early: EarlyProbes | None) -> GpuInventory:
    if nvml is None and early is not None:
        nvml = early.nvml.lib()  # NVML already started: its init, the slow part, is done
    return probe_gpus(nvml)


def recipe_paths(recipe: Recipe) -> list[str]:
    """The host paths a recipe uses, each probed once: the checkpoint, the draft model, every volume."""
    paths = [recipe.checkpoint.path]
    if isinstance(recipe.speculative, SpecDraft):
        paths.append(recipe.speculative.draft.path)
    paths += [v.host for v in recipe.container.volumes]
    return list(dict.fromkeys(paths))


def with_image_registry(facts: HostFacts, recipe: Recipe, *, offline: bool | None = None) -> HostFacts:
    """``facts`` with the recipe's image config from its registry (``host.registry``), asked only when the image
    is not among the local ones: a pulled image's own Env is the better word. ``offline`` None:
    ``RIGCTL_OFFLINE``. The registry module (and httpx) load only here."""
    if facts.podman.image(recipe.image_digest) is not None:
        return facts
    from rigctl.host.registry import image_config  # noqa: PLC0415 - httpx loads only for an image not pulled

    try:
        found = image_config(recipe.image, offline=offline)
    except Exception as exc:  # as a probe's: a bug here must not take the preflight down
        return facts.model_copy(update={"probe_errors": {**facts.probe_errors,
                                                         "image_registry": f"{type(exc).__name__}: {exc}"}})
    return facts.model_copy(update={"image_registry": found})


def facts_for_recipe(recipe: Recipe, inventory: str | Path | None = None, *, scope: Scope | None = None,
                     early: EarlyProbes | None = None, offline: bool | None = None) -> HostFacts:
    """The facts a recipe's preflight needs: a captured inventory replayed (licence acceptances recorded
    on this machine count too), or this host gathered with ``recipe_paths`` probed for ``scope`` (with
    ``early``, the probes the caller started early, let go once the facts are gathered). `preflight`,
    `up`, `up --dry-run` and `swap` all come through here, so they judge the same facts. An image not pulled
    here has its config read from its registry (``offline``, else ``RIGCTL_OFFLINE``, asks none)."""
    if inventory is not None:
        if early is not None:
            early.cancel()  # nothing of this host is wanted: the podman calls are killed, NVML is let go
        records, problem = read_acceptances()
        facts = load_inventory(inventory).with_licenses(records)
        if problem:  # the license check names it: a damaged record here must not read as "not accepted"
            facts = facts.model_copy(update={"probe_errors": {**facts.probe_errors, "licenses": problem}})
        return facts
    try:
        facts = gather_facts(recipe_paths(recipe), early=early, scope=scope, owners_of=[recipe.publish.port])
    finally:
        if early is not None:
            early.cancel()  # gathered: NVML is let go now, not after a deploy's minutes of warmup
    return with_image_registry(facts, recipe, offline=offline)
