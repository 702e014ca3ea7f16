"""Rules about the container podman starts: options podman refuses together, and the image's pin."""

from __future__ import annotations

from rigctl.doctor.edits import Edit, Remove, ReplaceWord
from rigctl.doctor.rules.context import Hit, RuleContext, entry_with
from rigctl.recipe.model import PODMAN_IPC_SHM_ERROR
from rigctl.recipe.reference import pinned


def ipc_shm(ctx: RuleContext) -> list[Hit]:
    spec = ctx.spec
    if spec.ipc != "host" or not spec.shm_size:
        return []
    section, key = ctx.run_keys
    entry = ctx.unit.merged.last("Container", "ShmSize") if "ShmSize=" in spec.shm_sources else None
    entry = entry or entry_with(ctx.unit.merged, section, key, "--shm-size")
    sources = " and ".join(spec.shm_sources)
    return [Hit(
        f"--ipc=host together with an explicit shm size ({sources} {spec.shm_size}): podman refuses to "
        f"start it: {PODMAN_IPC_SHM_ERROR!r}",
        "drop the shm size: host IPC already shares the host's /dev/shm",
        entry=entry, edits=(Remove("Container", "ShmSize"), Remove(section, key, "--shm-size")),
    )]


def image_pinned(ctx: RuleContext) -> list[Hit]:
    image = ctx.spec.image
    if not image or pinned(image) or image.endswith((".image", ".build")):
        return []  # quadlet .image/.build references are audited as their own files
    digest = ctx.facts.image_digests.get(image)
    edits: tuple[Edit, ...] = ()
    if digest and ctx.spec.image_entry is not None:
        base = image.split("@", 1)[0]
        edits = (ReplaceWord(ctx.spec.image_entry, image, f"{base}@{digest}"),)
        fix = f"pin it: {base}@{digest} (the digest of the image present on this host)"
    else:
        fix = (
            "pin it as NAME[:TAG]@sha256:<digest>; find the digest with "
            f"`podman image inspect --format '{{{{.Digest}}}}' {image}`"
        )
    return [Hit(
        f"image {image} is not pinned by digest: a re-pull or a pull on another box can bring a "
        "different engine build under the same name",
        fix, entry=ctx.spec.image_entry, edits=edits,
    )]
