"""Host, container and checkpoint checks: pure functions of (recipe, facts, chosen layout)."""

from __future__ import annotations

from rigctl.host.cdi import CDI_DIRS, nvidia_specs, stale
from rigctl.host.facts import GIB, PathProbe
from rigctl.places import Scope
from rigctl.podman_versions import NOTIFY_HEALTHY, PODMAN_FLOOR, QUADLET_FIRST, QUADLET_KEYS
from rigctl.podman_versions import fmt as _fmt
from rigctl.preflight.finding import Context, Verdict, fail, ok, skip, warn
from rigctl.recipe.model import PODMAN_IPC_SHM_ERROR, SpecDraft
from rigctl.util.text import counted

PODMAN_DEFAULT_SHM = 64 * 1024 * 1024


def _size_bytes(text: str) -> int:
    units = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
    text = text.strip()
    if text[-1].lower() in units:
        return int(text[:-1]) * units[text[-1].lower()]
    return int(text)


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:,.1f} GiB"


# --- shm, ipc ----------------------------------------------------------------------------------------


def check_ipc_shm(ctx: Context) -> Verdict:
    mode = ctx.recipe.container.ipc_mode
    shm = ctx.recipe.container.shm_given
    if mode == "host" and shm is not None:
        return fail(f"host IPC together with {shm}: podman refuses to start the container with "
                    f"{PODMAN_IPC_SHM_ERROR!r}",
                    "drop the explicit shm size (host IPC already shares the host's /dev/shm), or use ipc: private "
                    "with shm_size")
    return ok(f"ipc {mode}" + (f" with {shm}" if shm else "") + ": a combination podman accepts")


def check_shm(ctx: Context) -> Verdict:
    mode = ctx.recipe.container.ipc_mode
    multi = ctx.recipe.gpus.count > 1
    shm = ctx.facts.shm
    if mode == "host":
        if shm.total_bytes is None:
            return warn(f"host IPC but the size of {shm.path} is unknown ({shm.error})",
                        f"check `df -h {shm.path}`")
        if multi and shm.total_bytes < 1 * GIB:
            return fail(f"host IPC with only {_gib(shm.total_bytes)} of {shm.path}; multi-GPU engines exchange "
                        "tensors through it", f"enlarge it: `mount -o remount,size=16G {shm.path}`")
        return ok(f"host IPC: the container shares {shm.path} ({_gib(shm.total_bytes)} total, "
                  f"{_gib(shm.free_bytes)} free)")
    explicit = ctx.recipe.container.shm_size
    size = _size_bytes(explicit) if explicit else PODMAN_DEFAULT_SHM
    if multi and size < 1 * GIB:
        return fail(f"{mode} IPC with a {size // (1024 * 1024)} MiB /dev/shm"
                    f"{'' if explicit else ' (podman default)'} for {ctx.recipe.gpus.count} GPUs: NCCL and the "
                    "engine's workers run out of shared memory",
                    "set container.shm_size: 16g (or ipc: host, without shm_size)")
    if shm.total_bytes is not None and explicit and size > shm.total_bytes:
        return warn(f"shm_size {explicit} exceeds the host's {shm.path} ({_gib(shm.total_bytes)})",
                    "lower container.shm_size or enlarge the host's /dev/shm")
    return ok(f"{mode} IPC with a {_gib(size)} /dev/shm{'' if explicit else ' (podman default)'}")


# --- podman, image, CDI ----------------------------------------------------------------------------


def check_podman(ctx: Context) -> Verdict:
    p = ctx.facts.podman
    if not p.installed:
        return fail(f"podman is not installed ({p.error})", "install podman >= 5.0 (e.g. `apt-get install podman`)")
    have = p.found_version
    if have is None:
        return warn(f"podman is installed but its version is unknown ({p.version!r})", "check `podman version`")
    notes = []
    if have < PODMAN_FLOOR:
        return fail(f"podman {p.version} is older than {_fmt(PODMAN_FLOOR)}: `podman run` lacks flags the unit uses",
                    "install podman >= 5.0")
    if have < QUADLET_FIRST and p.quadlet is None:
        manager = f" for the {p.quadlet_scope} manager" if p.quadlet_scope else ""
        return fail(f"podman {p.version} has no quadlet (it came with {_fmt(QUADLET_FIRST)}) and no quadlet "
                    f"generator is installed{manager}", "install podman >= 5.0, or a quadlet generator from a newer "
                    "release")
    if have < QUADLET_FIRST:
        notes.append(f"quadlet comes from a newer release ({p.quadlet}) while `podman run` is {p.version}: it also "
                     "leaves a stale %t/%N.cid behind, so a second start can fail")
    if have < NOTIFY_HEALTHY:
        notes.append(f"Notify=healthy needs {_fmt(NOTIFY_HEALTHY)}: the unit is marked started when the container "
                     "starts, not when the engine is healthy; rigctl's warmup wait does the health gating")
    if ctx.recipe.container.shm_size and have < QUADLET_KEYS["ShmSize"] and p.quadlet is None:
        notes.append(f"ShmSize= needs {_fmt(QUADLET_KEYS['ShmSize'])}: the size goes through PodmanArgs=--shm-size")
    api = f", API socket {p.api_socket}" if p.api_ok else ""
    if notes:
        return warn(f"podman {p.version}{api}: " + "; ".join(notes), "upgrade to podman >= 5.0 for full support")
    return ok(f"podman {p.version}{api}: every quadlet key the unit needs (Notify=healthy from 5.0) is there")


def check_image(ctx: Context) -> Verdict:
    p = ctx.facts.podman
    image = ctx.recipe.image
    digest = ctx.recipe.image_digest
    pull = f"podman pull {image}"
    if not p.installed:
        return fail("podman is not installed: the image cannot be present", f"install podman, then `{pull}`")
    if p.images_via == "none":
        return warn(f"could not list local images ({p.error})", f"check `podman images`; if missing: `{pull}`")
    img = p.image(digest)
    if img is not None:
        names = ", ".join(img.names or img.repo_digests) or img.id[:12]
        return ok(f"{digest[:19]}... present locally ({names})")
    return fail(f"{ctx.recipe.image_name}@{digest[:19]}... is not present locally "
                f"({len(p.images)} image(s) listed via {p.images_via})",
                f"`{pull}` (a few GB; the first start would otherwise pull it inside the warmup budget)")


def check_cdi(ctx: Context) -> Verdict:
    if ctx.recipe.gpus.count == 0:
        return skip("the recipe needs no GPU")
    cdi = ctx.facts.cdi
    gen = "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
    specs = nvidia_specs(cdi)
    if not specs:
        where = " or ".join(cdi.dirs or CDI_DIRS)  # a capture without them: where the toolkit looks
        broken = [f"{s.path}: {s.error}" for s in cdi.specs if s.error]
        return fail(f"no CDI spec for nvidia.com/gpu in {where}" + (f" ({'; '.join(broken)})" if broken else ""),
                    f"install nvidia-container-toolkit and `{gen}`")
    names = {d for s in specs for d in s.devices}
    missing = [g for g in ctx.choice.gpus
               if not ({"all", str(g.index), g.uuid} & names)]
    if ctx.choice.gpus and missing:
        return fail(f"CDI spec(s) {', '.join(s.path for s in specs)} do not list GPU "
                    + ", ".join(f"{g.index} ({g.uuid})" for g in missing),
                    f"regenerate it: `{gen}`")
    driver = ctx.facts.gpu.driver_version
    for s in specs:
        why = stale(s, driver, cdi)
        if why:
            return fail(f"{s.path} {why}: containers fail with `cannot stat ...libEGL_nvidia.so...` or "
                        "unresolvable CDI devices", f"regenerate it: `{gen}`")
    covered = "all GPUs" if "all" in names else f"{len(names)} device name(s)"
    return ok(f"{', '.join(s.path for s in specs)}: {covered}" + (f", driver {driver}" if driver else ""))


# --- checkpoint, license, disk -------------------------------------------------------------------


def _checkpoint_problems(probe: PathProbe | None, names: list[str], path: str) -> tuple[list[str], int, list[str]]:
    """(missing shard names, bytes of present shards, empty shard names)."""
    if probe is None or not probe.exists or probe.files is None:
        return names, 0, []
    missing, empty, total = [], [], 0
    for name in names:
        entry = probe.file(name)
        if entry is None:
            missing.append(name)
        else:
            total += entry.size
            if entry.size == 0:
                empty.append(name)
    return missing, total, empty


def _listing(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_checkpoint(ctx: Context) -> Verdict:
    ck = ctx.recipe.checkpoint
    probe = ctx.facts.path(ck.path)
    download = f"`hf download {ck.source.split('@')[0]} --local-dir {ck.path}`"
    if probe is None:
        return skip(f"{ck.path} was not probed (inventory captured without this recipe's paths)")
    if not probe.exists:
        return fail(f"{ck.path} does not exist", f"download the checkpoint: {download}")
    if not probe.is_dir:
        return fail(f"{ck.path} is not a directory", f"point checkpoint.path at the checkpoint directory; {download}")
    names = ck.shard_names()
    missing, total, empty = _checkpoint_problems(probe, names, ck.path)
    if missing:
        return fail(f"{len(missing)} of {counted(ck.shards, 'shard')} missing in {ck.path}: {_listing(missing)}",
                    f"resume the download: {download}")
    if empty:
        return fail(f"empty shard(s): {_listing(empty)}", f"re-download them: {download}")
    if ck.total_bytes is not None and total != ck.total_bytes:
        return fail(f"{counted(ck.shards, 'shard')}, {total:,} bytes; the recipe says exactly "
                    f"{ck.total_bytes:,} ({total - ck.total_bytes:+,})",
                    f"a shard is truncated or from another revision: {download}")
    if ck.approx_bytes is not None and abs(total - ck.approx_bytes) > 0.02 * ck.approx_bytes:
        return fail(f"{counted(ck.shards, 'shard')}, {total:,} bytes: more than 2% from the published "
                    f"~{ck.approx_bytes:,}", f"check the revision and re-download: {download}")
    size = f"{counted(ck.shards, 'shard')}, {total:,} bytes" + (
        " (exact)" if ck.total_bytes else " (within 2% of published)")
    if ctx.checksum_problem:
        return fail(f"{size}; checksums not verified: {ctx.checksum_problem}",
                    "run preflight on the host that holds the checkpoint")
    if ctx.checksums is None:
        return ok(size + "; sha256 not checked (add --checksums)")
    if ck.sha256 is None:
        return warn(f"{size}; sha256 computed for {counted(len(ctx.checksums), 'shard')} but the recipe has no "
                    "manifest to compare with", "pin them: add checkpoint.sha256 (see the JSON output's checksums)")
    bad = [n for n in names if ck.sha256.get(n) != ctx.checksums.get(n)]
    if bad:
        return fail(f"sha256 mismatch for {len(bad)} shard(s): {_listing(bad)}", f"re-download them: {download}")
    return ok(f"{size}; sha256 of every shard matches the manifest")


def check_draft(ctx: Context) -> Verdict:
    spec = ctx.recipe.speculative
    if not isinstance(spec, SpecDraft):
        return skip("no draft model")
    d = spec.draft
    probe = ctx.facts.path(d.path)
    fetch = f"`hf download {d.source.split('@')[0]} --local-dir {d.path}`"
    if probe is None:
        return skip(f"{d.path} was not probed")
    if not probe.exists or probe.files is None:
        return fail(f"draft model {d.path} does not exist", f"download it: {fetch}")
    shards = [f for f in probe.files if f.name.endswith(".safetensors")]
    total = sum(f.size for f in shards)
    if len(shards) != d.shards or total != d.total_bytes:
        return fail(f"draft model: {len(shards)} shard(s), {total:,} bytes; the recipe says {d.shards}, "
                    f"exactly {d.total_bytes:,}", f"re-download it: {fetch}")
    return ok(f"draft model {d.source}: {d.shards} shard(s), {total:,} bytes (exact)")


def check_license(ctx: Context) -> Verdict:
    accepted = {lic.id: lic for lic in ctx.facts.licenses}
    needed = []
    rows = []
    for what, lic in ctx.recipe.licenses():
        if not lic.acceptance_required:
            rows.append(f"{what}: {lic.id} (no acceptance required)")
        elif lic.id in accepted:
            rec = accepted[lic.id]
            rows.append(f"{what}: {lic.id} accepted by {rec.by} at {rec.accepted_at}")
        else:
            needed.append((what, lic))
    if needed:
        ids = ",".join(lic.id for _, lic in needed)
        detail = "; ".join(f"{what}: {lic.id}" + (f" ({lic.note})" if lic.note else "")
                           + (f" {lic.url}" if lic.url else "") for what, lic in needed)
        if damaged := ctx.facts.probe_errors.get("licenses"):  # fail closed, but say why
            return fail(f"license acceptance required: {detail}; the record of acceptances cannot be read: "
                        f"{damaged}", "repair or remove that file, then accept again with "
                        f"`rigctl preflight {ctx.recipe.name} --accept-license {ids}`")
        return fail(f"license acceptance required and not recorded: {detail}",
                    f"review the license, then `rigctl preflight {ctx.recipe.name} --accept-license {ids}` "
                    "(recorded in $XDG_STATE_HOME/rigctl/licenses.json)")
    return ok("; ".join(rows))


def check_disk(ctx: Context) -> Verdict:
    ck = ctx.recipe.checkpoint
    need = ck.total_bytes or ck.approx_bytes or 0
    probe = ctx.facts.path(ck.path)
    problems = []
    if probe is not None and not probe.exists and probe.free_bytes is not None and probe.free_bytes < need:
        problems.append(f"{ck.path} is missing and {probe.probed} has {_gib(probe.free_bytes)} free; the "
                        f"checkpoint needs {_gib(need)}")
    low = [p for p in ctx.facts.paths if p.free_bytes is not None and p.free_bytes < 10 * GIB]
    if problems:
        return fail("; ".join(problems), f"free space on {probe.probed if probe else ck.path} or set checkpoint.path "
                    "to a larger disk")
    if low:
        return warn("; ".join(f"{p.path}: only {_gib(p.free_bytes)} free on {p.probed}" for p in low),
                    "free space: compile caches and logs grow during warmup")
    rows = sorted({(p.probed or p.path, p.free_bytes) for p in ctx.facts.paths}, key=lambda r: r[0])
    return ok(", ".join(f"{where}: {_gib(free)} free" for where, free in rows) or "no paths probed")


# --- port, systemd, known-bad ----------------------------------------------------------------------

_OWN_RUNTIME = {"conmon", "rootlessport", "podman", "netavark", "aardvark-dns", "slirp4netns", "pasta"}


def check_port(ctx: Context) -> Verdict:
    pub = ctx.recipe.publish
    ports = ctx.facts.ports
    if ports.error:
        return warn(f"cannot tell whether {pub.address}:{pub.port} is free ({ports.error})",
                    f"check `ss -ltnp 'sport = :{pub.port}'`")
    holder = ports.holder(pub.port, pub.address)
    if holder is None:
        return ok(f"{pub.address}:{pub.port} is free")
    who = f"PID {holder.pid} {holder.process or ''}".strip() if holder.pid else "a process not visible here"
    fix = "stop it, or publish elsewhere: --set container.publish.port=<free port>"
    if holder.process in _OWN_RUNTIME:
        return warn(f"{pub.address}:{pub.port} is held by {who} on {holder.address}: probably a container, perhaps "
                    f"this recipe's own running unit", "if it is another service: " + fix)
    return fail(f"{pub.address}:{pub.port} is taken by {who} (listening on {holder.address}:{holder.port})", fix)


def check_systemd(ctx: Context) -> Verdict:
    s = ctx.facts.systemd
    scope = ctx.scope or Scope.of(s.uid == 0)  # no scope given: as the facts' user would get
    if scope == "system":
        if s.system_manager:
            return ok("the system manager answers (/run/systemd/private): the unit goes to /etc/containers/systemd/")
        return fail("no systemd system manager answers on /run/systemd/private (PID 1 is not systemd, or it is "
                    "not running): quadlet units cannot run",
                    "run on a host booted with systemd, or as a user with a `systemd --user` manager")
    if not s.user_manager:
        return fail(f"no systemd user manager for {s.user}: user quadlets in ~/.config/containers/systemd/ cannot run",
                    f"log in through a session that starts one (or `sudo systemctl start user@{s.uid}`), "
                    f"and `loginctl enable-linger {s.user}`")
    if not s.linger:
        return warn(f"user manager present but linger is off for {s.user}: the service stops at logout",
                    f"`sudo loginctl enable-linger {s.user}`")
    return ok(f"user manager for {s.user} with linger")
