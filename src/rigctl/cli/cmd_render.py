"""rigctl render: a recipe's quadlet units, or its Kubernetes / podman kube manifests, printed or written
to a directory."""

from __future__ import annotations

from rigctl.cli import options as opt
from rigctl.cli import views
from rigctl.cli.output import Outcome
from rigctl.cli.root import app, finish, load_recipe
from rigctl.errors import UsageError
from rigctl.places import Scope, default_scope
from rigctl.util.lists import split_list


@app.command("render")
def render_cmd(
    recipe: opt.RecipeArg,
    *,
    out: opt.OutDirOpt = None, podman_version: opt.PodmanVersionOpt = None, inventory: opt.InventoryOpt = None,
    quadlet_version: opt.QuadletVersionOpt = None, gpus: opt.GpusOpt = None, user: opt.UserOpt = False,
    system: opt.SystemOpt = False, scope: opt.ScopeOpt = None,
    target: opt.TargetOpt = "quadlet", model_pvc: opt.ModelPvcOpt = None, verify_job: opt.VerifyJobOpt = None,
    node_product: opt.NodeProductOpt = None, namespace: opt.NamespaceOpt = None, sets: opt.SetOpt = None,
    overlays: opt.OverlayOpt = None, as_json: opt.JsonOpt = False,
) -> None:
    """Render RECIPE into the podman quadlet unit (.container) that `up` would install here, for this host's
    podman and quadlet generator (or an --inventory's, or --podman-version), or (--target) into Kubernetes
    manifests, or into manifests for `podman kube play` with a quadlet .kube unit. stdout is the unit (or
    the manifests) alone, so `rigctl render RECIPE > NAME.container` is a valid unit; what rigctl says about
    it goes to stderr. With --out DIR, the files are written there and stdout lists their paths."""

    def produce() -> Outcome:
        # the core: the planner, the renderer and its templates (jinja2), most of what render costs to start
        from rigctl.plan.rendering import placement_for, render_manifests, render_quadlet  # noqa: PLC0415

        if target not in opt.RENDER_TARGETS:
            raise UsageError(f"--target {target!r}: expected one of {', '.join(opt.RENDER_TARGETS)}")
        manager = _manager(user, system, scope)
        kube_only = [o for o, v in (("--model-pvc", model_pvc), ("--verify-job", verify_job),
                                    ("--node-product", node_product), ("--namespace", namespace)) if v]
        if target == "quadlet" and kube_only:
            raise UsageError(f"{', '.join(kube_only)}: for --target kube (or podman-kube), not quadlet units")
        box_only = [o for o, v in (("--gpus", gpus), ("--inventory", inventory), ("--podman-version", podman_version),
                                   ("--quadlet-version", quadlet_version)) if v]
        if target == "kube" and (box_only or user or scope == "user"):
            raise UsageError(f"{', '.join(box_only) or '--user'}: Kubernetes' device plugin and scheduler choose "
                             "the box and its GPUs; these options are for quadlet and podman-kube")
        selection = split_list(gpus, option="--gpus") if gpus is not None else None
        loaded = load_recipe(recipe, overlays, sets)
        if target == "kube":
            kube = render_manifests(loaded.recipe, None, model_pvc=model_pvc, verify_job=verify_job,
                                    node_product=node_product, namespace=namespace, out=out)
            return Outcome("render", True, kube, view=views.kube(kube.rendered, kube.files, kube.notes,
                                                                 written=kube.written))
        placement, podman = placement_for(loaded.recipe, selection, inventory, podman_version,
                                          quadlet_version=quadlet_version, scope=manager)
        if target == "podman-kube":
            kube = render_manifests(loaded.recipe, placement, podman=podman, scope=manager, model_pvc=model_pvc,
                                    verify_job=verify_job, namespace=namespace, out=out)
            return Outcome("render", True, kube, view=views.kube(kube.rendered, kube.files, kube.notes,
                                                                 written=kube.written))
        units = render_quadlet(loaded.recipe, placement, podman, scope=manager, out=out)
        return Outcome("render", True, units, view=views.quadlet(units, written=out is not None))

    finish("render", as_json, produce)


def _manager(user: bool, system: bool, scope: str | None) -> Scope:
    """The manager to render for: --user or --system as every command spells it (--scope, the old spelling,
    still accepted); neither, the default scope, as `up`. Rendering for the system manager needs no root: it
    only prints."""
    if scope not in (None, "system", "user"):
        raise UsageError(f"--scope {scope!r}: expected system or user")
    chosen = {flag for flag, given in (("user", user), ("system", system)) if given} | ({scope} if scope else set())
    if len(chosen) > 1:
        raise UsageError("--user and --system exclude each other")
    return Scope(chosen.pop()) if chosen else default_scope()
