"""Every option and argument of rigctl's commands, as ``Annotated`` aliases grouped by command. A command's
signature names the alias and the default (``force: opt.ForceOpt = None``), so an option that several
commands take is spelled once (name, metavar, help), and the whole command line can be reviewed here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from rigctl.cli.commands import ROOT_OPTIONS
from rigctl.cli.complete import recipe_names

RENDER_TARGETS = ("quadlet", "kube", "podman-kube")


def _print_version(value: bool) -> None:
    if value:
        from rigctl.util.text import version_line  # noqa: PLC0415 - only for --version

        typer.echo(version_line())
        raise typer.Exit()


# --- the root's, before the command (their words are in the command table: the root help lists them) ---

def _root(name: str, *, is_eager: bool = False, callback: Callable[[bool], None] | None = None) -> Any:
    """The root's option ``name`` as the command table has it (its names, metavar and help)."""
    option = ROOT_OPTIONS[name]
    return typer.Option(*option.names, metavar=option.metavar, help=option.help, is_eager=is_eager, callback=callback)


HostOpt = Annotated[str | None, _root("--host")]
RootHostsOpt = Annotated[str | None, _root("--hosts")]
RootAllowSshOptionsOpt = Annotated[bool, _root("--allow-ssh-options")]
QuietOpt = Annotated[bool, _root("--quiet")]
VerboseOpt = Annotated[bool, _root("--verbose")]
VersionOpt = Annotated[bool, _root("--version", is_eager=True, callback=_print_version)]

# --- shared by several commands, in the order `up` takes them ------------------------------------------

RecipeArg = Annotated[
    str, typer.Argument(metavar="RECIPE", help="A recipe name (see `rigctl recipes`) or a YAML path.",
                        autocompletion=recipe_names)
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY.PATH=VALUE", help="Override one recipe value (YAML), e.g. engine.port=8002."),
]
OverlayOpt = Annotated[
    list[str] | None,
    typer.Option("--overlay", "-f", metavar="FILE", help="YAML file deep-merged over the recipe (repeatable)."),
]
ForceOpt = Annotated[
    list[str] | None,
    typer.Option("--force", metavar="ID,...", help="Downgrade these preflight checks' failures to warnings, e.g. "
                 "known-bad (repeatable)."),
]
GpusOpt = Annotated[
    str | None,
    typer.Option("--gpus", metavar="ID,...", help="Use these GPUs: UUIDs (preferred) or indices, comma-separated "
                 "(default: the layout preflight chooses)."),
]
UserOpt = Annotated[bool, typer.Option("--user", help="User scope: ~/.config/containers/systemd, systemctl --user.")]
SystemOpt = Annotated[bool, typer.Option("--system", help="System scope: /etc/containers/systemd (root).")]
InventoryOpt = Annotated[
    str | None,
    typer.Option("--inventory", metavar="FILE", help="Use a captured `rigctl inventory --json` instead of this host."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of text.")]

# --- inventory and preflight -------------------------------------------------------------------------

ProbePathsArg = Annotated[list[str] | None, typer.Argument(metavar="[PATH...]", help="Extra paths to probe.")]
ChecksumsOpt = Annotated[bool, typer.Option("--checksums", help="Also verify the sha256 of every shard (cached).")]
AcceptOpt = Annotated[
    list[str] | None,
    typer.Option("--accept-license", metavar="ID", help="Record that you accept this license id (after review)."),
]
DeepOpt = Annotated[bool, typer.Option("--deep", help="Also run a real NCCL all_reduce on the chosen GPUs (slow).")]

# --- up, logs, down, swap ----------------------------------------------------------------------------

DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Preflight and render; install nothing.")]
NoVerifyOpt = Annotated[bool, typer.Option("--no-verify", help="Skip smoke and repetition after ready.")]
KeepFailedOpt = Annotated[bool, typer.Option(
    "--keep-failed", help="Leave a unit that died in warmup to systemd's restarts; default: stop it.")]
ProgressOpt = Annotated[str, typer.Option(
    "--progress", metavar="auto|live|plain|none",
    help="How the warmup is shown on stderr: live (redrawn in place), plain (a line at each phase and every "
         "30 s: pipes, CI, ssh), none; auto: live on a terminal, plain elsewhere, none with --json.")]
FollowOpt = Annotated[bool, typer.Option(
    "--follow", "-f", help="Keep printing new output, across restarts, until the unit stops for good.")]
SinceOpt = Annotated[str | None, typer.Option("--since", help="Only output after this (e.g. 10m, 2024-01-01).")]
TailOpt = Annotated[int | None, typer.Option("--tail", "-n", help="Only the last N lines.")]
RestartWaitOpt = Annotated[float, typer.Option(
    "--restart-wait", min=1, metavar="SECONDS",
    help="With -f: how long to wait for the next container after one exits (at least the recipe's "
         "restart_sec + 30).")]
RemoveOpt = Annotated[bool, typer.Option("--remove", help="Also remove the unit files and rigctl's record.")]
FromArg = Annotated[str, typer.Argument(metavar="FROM", help="The deployed recipe to replace (name or path).")]
ToArg = Annotated[str, typer.Argument(metavar="TO", help="The recipe to serve instead (name or path).")]
ReleaseTimeoutOpt = Annotated[float, typer.Option(
    "--release-timeout", min=0, help="Seconds to wait for FROM's GPU memory to be released.")]

# --- render ------------------------------------------------------------------------------------------

OutDirOpt = Annotated[
    Path | None,
    typer.Option("--out", metavar="DIR", help="Write the units into DIR (atomically) instead of only printing."),
]
PodmanVersionOpt = Annotated[
    str | None,
    typer.Option("--podman-version", metavar="X.Y",
                 help="The podman that will run the container (default: the inventory's, else this host's; "
                      "5.4 where there is none)."),
]
QuadletVersionOpt = Annotated[
    str | None,
    typer.Option(
        "--quadlet-version", metavar="X.Y",
        help="The quadlet generator's version when it differs from podman's (podman < 4.4 has none; "
             "default: the one found for the scope on the inventory's box or this host).",
    ),
]
ScopeOpt = Annotated[
    str | None, typer.Option("--scope", metavar="system|user", hidden=True,
                             help="The old spelling of --system / --user (render only).")
]
TargetOpt = Annotated[
    str,
    typer.Option("--target", metavar="|".join(RENDER_TARGETS),
                 help="quadlet units, Kubernetes manifests, or `podman kube play` manifests with a .kube unit."),
]
ModelPvcOpt = Annotated[
    str | None,
    typer.Option("--model-pvc", metavar="NAME", help="kube: the checkpoint from this claim, not a host path."),
]
VerifyJobOpt = Annotated[
    str | None,
    typer.Option("--verify-job", metavar="IMAGE", help="kube: add a Job that runs `rigctl verify` from IMAGE (pinned) "
                 "against the Service."),
]
NamespaceOpt = Annotated[
    str | None,
    typer.Option("--namespace", metavar="NAME",
                 help="kube, podman-kube: put every object in this namespace (a DNS-1123 label; default: "
                      "kubectl's current one)."),
]
NodeProductOpt = Annotated[
    list[str] | None,
    typer.Option("--node-product", metavar="LABEL",
                 help="kube: select nodes by this nvidia.com/gpu.product value (repeatable) instead of the "
                      "recipe's products."),
]

# --- verify (cmd_verify names the checks in --checks' help when it is shown) ---------------------------

VerifyRecipeArg = Annotated[
    str | None,
    typer.Argument(metavar="[RECIPE]", help="A recipe name or YAML path: endpoint and expectations come from it."),
]
UrlOpt = Annotated[str | None, typer.Option("--url", help="Endpoint base URL, e.g. http://127.0.0.1:8000.")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Served model name, as /v1/models lists it.")]
ContextOpt = Annotated[
    int | None, typer.Option("--context", min=256, help="Expected context length (max_model_len).")
]
EngineOpt = Annotated[
    str | None,
    typer.Option("--engine", metavar="KIND", help="The engine's dialect: vllm, sglang, llamacpp, tabbyapi or "
                 "openai (default: the recipe's engine.kind, else detected)."),
]
ChecksOpt = Annotated[str | None, typer.Option("--checks", metavar="a,b", help="Checks to run (default: all).")]
RequestTimeoutOpt = Annotated[
    float | None, typer.Option("--timeout", min=1, help="Seconds one request may take (default 60).")
]
ConcurrencyOpt = Annotated[int | None, typer.Option("--concurrency", min=1, help="Soak: streams at once.")]
RequestsOpt = Annotated[int | None, typer.Option("--requests", min=1, help="Soak: requests in all.")]
ApiKeyOpt = Annotated[
    str | None, typer.Option("--api-key", envvar="RIGCTL_API_KEY", help="Bearer token, if the server wants one.")
]

# --- doctor and fleet --------------------------------------------------------------------------------

PathOpt = Annotated[
    list[str] | None,
    typer.Option("--path", metavar="DIR", help="Audit only units under this directory or file (repeatable)."),
]
RestartFixedOpt = Annotated[
    bool,
    typer.Option("--restart", help="With --fix: restart each fixed service whose new container command line "
                 "runs only at its next start (queued, not waited for)."),
]
FixOpt = Annotated[
    bool,
    typer.Option("--fix", help="Rewrite rigctl-managed units atomically (keeping .bak); print a patch for the others."),
]
HostsOpt = Annotated[
    str | None,
    typer.Option("--hosts", metavar="FILE",
                 help="Host inventory (default: the root's --hosts, else $XDG_CONFIG_HOME/rigctl/hosts.yaml)."),
]
TagOpt = Annotated[
    list[str] | None,
    typer.Option("--tag", metavar="TAG", help="Only hosts carrying this tag (repeatable, or a,b: every one)."),
]
OnlyOpt = Annotated[
    list[str] | None, typer.Option("--only", metavar="NAME", help="Only this host (repeatable, or a,b).")
]
LimitOpt = Annotated[
    str | None,
    typer.Option("--limit", metavar="PATTERN",
                 help="Hosts or groups as Ansible's --limit: a,b (or a:b), !x to leave out, &x to intersect, "
                      "@FILE, * globs."),
]
AllowSshOptionsOpt = Annotated[
    bool,
    typer.Option("--allow-ssh-options", "--allow-ssh-commands",
                 help="Trust the inventory as code: let it set ssh options beyond connection settings "
                      "(ProxyCommand, forwards, agents, known-hosts files). Refused without it; Port, User, "
                      "ProxyJump and the like need no flag."),
]
ParallelOpt = Annotated[int, typer.Option("--parallel", min=1, max=256, help="Hosts contacted at once.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=1, help="Seconds allowed per host.")]
FleetFixOpt = Annotated[
    bool,
    typer.Option("--fix", help="Run `rigctl doctor --fix` on each host (needs rigctl there; a host without it "
                               "is changed in no way and gets the patches only)."),
]
RemoteRecipeArg = Annotated[str, typer.Argument(metavar="RECIPE", help="Recipe name known to the remote rigctl.")]
RemoteFromArg = Annotated[str, typer.Argument(metavar="FROM", help="The deployed recipe to replace on each host.")]
RemoteToArg = Annotated[str, typer.Argument(metavar="TO", help="The recipe to serve instead.")]
SwapParallelOpt = Annotated[
    int, typer.Option("--parallel", min=1, help="Hosts swapped at once (default: one by one).")
]

# --- validate, schema, new, checks, explain ----------------------------------------------------------

RecipeFilesArg = Annotated[
    list[str],
    typer.Argument(metavar="RECIPE|FILE...", autocompletion=recipe_names,
                   help="Recipe names (see `rigctl recipes`) or YAML files to check."),
]
SchemaNameArg = Annotated[str, typer.Argument(metavar="NAME", help="What to describe: recipe.")]
SchemaOutOpt = Annotated[
    Path | None, typer.Option("--out", metavar="FILE", help="Write it to FILE instead of stdout.")
]
NewNameArg = Annotated[str, typer.Argument(metavar="NAME", help="The new recipe's name.")]
NewFromOpt = Annotated[
    str,
    typer.Option("--from", metavar="RECIPE", autocompletion=recipe_names,
                 help="The recipe to start from (a name or a YAML path)."),
]
NewOutOpt = Annotated[
    Path | None, typer.Option("--out", metavar="FILE", help="Write it here instead of the user recipe directory.")
]
KindOpt = Annotated[str | None, typer.Option("--kind", metavar="KIND", help="Only preflight, verify or doctor.")]
CheckIdArg = Annotated[str, typer.Argument(metavar="ID", help="A check id, as `rigctl checks` lists them.")]

# --- canary, metrics, verify --export ----------------------------------------------------------------

CanaryNameArg = Annotated[
    str, typer.Argument(metavar="NAME", autocompletion=recipe_names, help="The deployment (or its recipe's path).")
]
EveryOpt = Annotated[
    str | None,
    typer.Option("--every", metavar="SPAN", help="Install (or change) the canary: run every SPAN, e.g. 10m, 1h "
                 "(at least 1m; 1s on the test bed, RIGCTL_TESTBED=1)."),
]
CanaryChecksOpt = Annotated[
    str | None,
    typer.Option("--checks", metavar="a,b", help="Checks each run: health, models, smoke, repetition, determinism, "
                 "needle (default: health,smoke,repetition)."),
]
OnFailureOpt = Annotated[
    str, typer.Option("--on-failure", metavar="restart|none",
                      help="After --after failures in a row: restart the service once (never again until a run "
                           "passes), or only record it."),
]
AfterOpt = Annotated[int, typer.Option("--after", min=1, help="Consecutive failures before --on-failure acts.")]
CanaryTimeoutOpt = Annotated[
    str | None,
    typer.Option("--timeout", metavar="SPAN", help="Each run's bound: no verdict by then is a failure (default: "
                 "the interval, at most 2m)."),
]
BaselineOpt = Annotated[
    Path | None,
    typer.Option("--baseline", metavar="FILE", help="A `rigctl verify NAME --export` file: each run also asks its "
                 "requests again and fails when an answer is not the exported one (with --every)."),
]
OffOpt = Annotated[bool, typer.Option("--off", help="Remove the canary: its timer, service and record.")]
RunOnceOpt = Annotated[
    bool, typer.Option("--run-once", help="Run the checks once now and record the result (what the timer runs).")
]
TextfileOpt = Annotated[
    Path | None,
    typer.Option("--textfile", metavar="DIR", help="Write DIR/rigctl.prom atomically, for node_exporter's "
                 "textfile collector, instead of printing it."),
]
ExportOpt = Annotated[
    Path | None,
    typer.Option("--export", metavar="FILE", help="Also write the soak's figures as `vllm bench serve`'s JSON "
                 "result, with the recipe, image digest and GPUs."),
]
