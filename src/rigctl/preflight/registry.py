"""The registry of checks and the runner: isolation, --force, the verdict.

The registry is an explicit tuple; the order is the order of the table. The runner chooses the GPU
layout once, computes checksums when asked (the only part that reads files), runs every check inside
its own try, and decides ``ok``: no ``fail`` and no ``error``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rigctl.errors import UsageError
from rigctl.findings import any_failing
from rigctl.host.facts import HostFacts
from rigctl.places import Scope
from rigctl.preflight import gpu_checks as g
from rigctl.preflight import host_checks as h
from rigctl.preflight import secrets as s
from rigctl.preflight import stack_checks as k
from rigctl.preflight.finding import Check, Context, Finding, Severity, Verdict
from rigctl.preflight.gpu_fit import check_gpu_fit
from rigctl.preflight.layout import Choice, choose_gpus
from rigctl.recipe.model import Recipe

# Every row says whether `--force ID` may downgrade the check's failure to a warning (`rigctl explain` says so too).
CHECKS: tuple[Check, ...] = (
    Check("gpu-driver", "NVML answers and the driver is new enough", g.check_driver, forceable=False),
    Check("gpu-count", "enough GPUs match the recipe", g.check_count, forceable=True),
    Check("gpu-model", "the chosen GPUs are products the recipe accepts", g.check_model, forceable=True),
    Check("gpu-memory", "each chosen GPU has the memory the recipe needs", g.check_memory, forceable=True),
    Check("gpu-compute-capability", "the chosen GPUs' compute capability is supported",
          g.check_compute_capability, forceable=True),
    Check("gpu-busy", "no process holds memory on the chosen GPUs", g.check_busy, forceable=True),
    Check("gpu-fit", "weights and the KV cache for the recipe's context fit the chosen GPUs", check_gpu_fit,
          forceable=True),
    Check("gpu-mig", "MIG is off on the chosen GPUs", g.check_mig, forceable=True),
    Check("gpu-p2p", "peer-to-peer between the chosen GPUs", g.check_p2p, forceable=True),
    Check("gpu-power", "power limits of the chosen GPUs", g.check_power, forceable=True),
    Check("shm", "shared memory for the engine's workers", h.check_shm, forceable=True),
    Check("ipc-shm", "host IPC is not combined with an explicit shm size", h.check_ipc_shm, forceable=False),
    Check("secret-in-unit", "no credential-looking value is written in clear into the unit", s.check_secrets,
          forceable=False),  # it only warns
    Check("podman", "podman's version against what the unit needs", h.check_podman, forceable=True),
    Check("image", "the pinned image digest is present locally", h.check_image, forceable=True),
    Check("cdi", "a CDI spec covers the chosen GPUs and matches the driver", h.check_cdi, forceable=True),
    Check("checkpoint", "shards present, exact bytes, sha256 with --checksums", h.check_checkpoint, forceable=True),
    Check("draft", "the speculative-decoding draft model is present", h.check_draft, forceable=True),
    Check("license", "licenses that need acceptance are accepted", h.check_license, forceable=False),
    Check("disk", "free space at the checkpoint and cache paths", h.check_disk, forceable=True),
    Check("port", "the publish port is free", h.check_port, forceable=True),
    Check("systemd", "a systemd manager can run the unit", h.check_systemd, forceable=True),
    Check("kernel-module", "the NVIDIA kernel module's flavour suits the GPUs (Blackwell: open)",
          k.check_kernel_module, forceable=True),
    Check("image-cuda", "the image's CUDA is not newer than the driver's", k.check_image_cuda, forceable=True),
    Check("pcie-link", "the chosen GPUs' PCIe links run at their full width", k.check_pcie_link, forceable=True),
    Check("pcie-acs", "no ACS redirect on a PCIe switch port between the chosen GPUs", k.check_pcie_acs,
          forceable=True),
    Check("iommu", "the IOMMU passes the chosen GPUs' peer-to-peer traffic through", k.check_iommu,
          forceable=True),
    Check("gpu-xid", "no Xid errors since boot on the chosen GPUs", k.check_gpu_xid, forceable=True),
    Check("known-bad", "known-bad combinations (rigctl's table and the recipe's) on this host and image",
          k.check_known_bad, forceable=True),
)

DEEP_IDS = ("gpu-allreduce",)


def check_ids() -> list[str]:
    return [c.id for c in CHECKS] + list(DEEP_IDS)


@dataclass(frozen=True)
class PreflightReport:
    findings: list[Finding]
    choice: Choice
    checksums: dict[str, str] | None = None
    forced: list[str] = field(default_factory=list)
    other_scope: str | None = None  # why the other manager could run it here (``HostFacts.other_scope``)

    @property
    def ok(self) -> bool:
        return not any_failing(self.findings)

    def finding(self, check_id: str) -> Finding:
        return next(f for f in self.findings if f.id == check_id)


def _run_one(check: Check, ctx: Context) -> Finding:
    try:
        return check.run(ctx)
    except Exception as exc:  # a crashing check is a bug; report it and let the others run
        return Finding(id=check.id, severity=Severity.ERROR,
                       message=f"the check crashed: {type(exc).__name__}: {exc}",
                       fix="this is a bug in rigctl; please report it with `rigctl inventory --json`")


def _apply_force(finding: Finding, check: Check | None, force: set[str]) -> Finding:
    if finding.id not in force or finding.severity is not Severity.FAIL or (check and not check.forceable):
        return finding
    return finding.model_copy(update={"severity": Severity.WARN, "message": f"(forced) {finding.message}"})


def _checksums(recipe: Recipe, facts: HostFacts, progress_factory: ProgressFactory | None,
               ) -> tuple[dict[str, str] | None, str | None]:
    """Hash the shards that exist on THIS machine. With a replayed inventory they may not be here."""
    from rigctl.host.checksums import ChecksumCache, hash_files  # noqa: PLC0415 - only with --checksums

    ck = recipe.checkpoint
    probe = facts.path(ck.path)
    if probe is None or not probe.exists:
        return None, None  # the checkpoint check reports the missing directory
    base = Path(ck.path)
    paths = [base / n for n in ck.shard_names() if (base / n).is_file()]
    if not base.is_dir():
        return None, f"{ck.path} is not on this machine (replayed inventory?)"
    if not paths:
        return None, None
    total = sum(p.stat().st_size for p in paths)
    progress = progress_factory(total, len(paths)) if progress_factory else None
    hashed = hash_files(paths, cache=ChecksumCache(), progress=progress)
    return {Path(x.path).name: x.sha256 for x in hashed}, None


ProgressFactory = Callable[[int, int], Callable[[int], None]]  # (total bytes, files) -> advance(bytes)
DeepRunner = Callable[[Recipe, HostFacts, Choice], dict[str, Verdict]]


def run_preflight(
    recipe: Recipe,
    facts: HostFacts,
    *,
    force: Iterable[str] = (),
    checksums: bool = False,
    gpus: Sequence[str] | None = None,
    deep: DeepRunner | None = None,
    progress: ProgressFactory | None = None,
    scope: Scope | None = None,
) -> PreflightReport:
    """Every check against ``facts``. ``gpus`` is an explicit selection (indices or UUIDs);
    ``force`` lists check ids whose failure is downgraded to a warning (not license, ipc-shm, driver)."""
    forced = set(force)
    unknown = sorted(forced - set(check_ids()))
    if unknown:
        raise UsageError(f"--force {','.join(unknown)}: no such check",
                         fix=f"check ids: {', '.join(check_ids())}")
    choice = choose_gpus(recipe, facts, gpus)
    other_scope = facts.other_scope(scope)
    sums, problem = _checksums(recipe, facts, progress) if checksums else (None, None)
    deep_results = deep(recipe, facts, choice) if deep is not None else {}
    ctx = Context(recipe=recipe, facts=facts, choice=choice, checksums=sums, checksum_problem=problem,
                  deep=deep_results, scope=scope)
    findings = [_apply_force(_run_one(c, ctx), c, forced) for c in CHECKS]
    for check_id, verdict in deep_results.items():
        findings.append(_apply_force(Finding(id=check_id, severity=verdict.severity, message=verdict.message,
                                             fix=verdict.fix, figures=verdict.figures), None, forced))
    return PreflightReport(findings=findings, choice=choice, checksums=sums, forced=sorted(forced),
                           other_scope=other_scope)
