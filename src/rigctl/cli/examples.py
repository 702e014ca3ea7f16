"""The "Examples:" at the end of every command's --help, as operators type them. One table for all commands
(``app.register`` attaches each to its command), so the command modules stay about what they do;
tests/cli/test_meta_commands.py parses every line against its command, so an example cannot outlive an
option it uses. The root help ends with ``ROOT_EXAMPLES``: a first session. (Each command's line in the
root help is its summary in the command table, ``cli.commands``.)"""

from __future__ import annotations

# command (as typed after `rigctl`) -> (example arguments, what it does)
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "up": (
        ("up glm53-flash --dry-run", "what it would check, render and install; changes nothing"),
        ("up glm53-flash", "preflight, install, start, wait through warmup, smoke-test"),
        ("up qwen3-8b-vllm --user --set engine.port=8002", "a user unit, on another port"),
        ("up glm53-flash --progress plain", "a line per warmup phase and every 30 s, as in a pipe"),
    ),
    "status": (
        ("status", "every rigctl-managed service here"),
        ("status --json", "the same for a script"),
    ),
    "logs": (
        ("logs glm53-flash", "the engine's output, crash signatures explained"),
        ("logs glm53-flash -f", "follow it, across restarts"),
    ),
    "down": (
        ("down glm53-flash", "stop it (the unit stays installed)"),
        ("down glm53-flash --remove", "stop it and remove its unit"),
    ),
    "doctor": (
        ("doctor", "audit every serving unit on this host"),
        ("doctor --fix", "rewrite rigctl's units; a patch for the others"),
        ("doctor --path ./units --json", "only the units under ./units"),
    ),
    "swap": (
        ("swap qwen3-8b-vllm glm53-flash", "replace one model by another, roll back on failure"),
    ),
    "inventory": (
        ("inventory", "GPUs, shm, disk, podman, CDI, systemd, ports"),
        ("inventory --json > box.json", "capture it, to plan from another machine"),
    ),
    "preflight": (
        ("preflight glm53-flash", "can it run here?"),
        ("preflight glm53-flash --inventory box.json", "against a captured inventory"),
        ("preflight glm53-flash --user", "for the user manager, as `up --user` would use it"),
        ("preflight glm53-flash --accept-license shapleymcg-license-1.0", "record the licence review"),
        ("preflight glm53-flash --force known-bad", "run a known-bad combination anyway"),
    ),
    "recipes": (
        ("recipes", "bundled and your own, each validated"),
    ),
    "show": (
        ("show glm53-flash", "every value, defaults filled in"),
        ("show glm53-flash --set checkpoint.path=/data/glm --json", "after an override"),
    ),
    "validate": (
        ("validate glm53-flash", "a recipe by name"),
        ("validate my-box.yaml other.yaml", "files: every problem with its line"),
    ),
    "new": (
        ("new my-glm --from glm53-flash", "a copy to edit, in your recipe directory"),
        ("new my-glm --from glm53-flash --out ./my-glm.yaml", "written where you say"),
    ),
    "schema": (
        ("schema recipe", "the recipe's JSON Schema, for editors"),
        ("schema recipe --out recipe.schema.json", "into a file"),
    ),
    "render": (
        ("render glm53-flash > rigctl-glm53-flash.container", "the unit `up` would install here, alone"),
        ("render glm53-flash --podman-version 5.4 --user", "for another podman and the user manager"),
        ("render glm53-flash --out units/", "into a directory"),
        ("render glm53-flash --target kube", "Kubernetes manifests"),
    ),
    "verify": (
        ("verify glm53-flash", "every check against the served model"),
        ("verify glm53-flash --checks smoke,needle", "some of them"),
        ("verify --url http://127.0.0.1:8000 --model qwen3-8b", "any OpenAI-compatible endpoint"),
    ),
    "canary": (
        ("canary glm53-flash --every 10m", "smoke and repetition every 10 minutes, recorded"),
        ("canary glm53-flash --every 10m --on-failure restart --after 2", "and restart it once when it goes wrong"),
        ("canary glm53-flash --every 10m --baseline glm53.json", "and the answers `verify --export glm53.json` kept"),
        ("canary glm53-flash", "its last runs"),
        ("canary glm53-flash --off", "remove its timer, service and record"),
    ),
    "metrics": (
        ("metrics", "Prometheus text for every deployment"),
        ("metrics --textfile /var/lib/node_exporter/textfile", "for node_exporter's textfile collector"),
    ),
    "checks": (
        ("checks", "every preflight, verify and doctor check"),
        ("checks --kind doctor --json", "one kind, for a script"),
    ),
    "explain": (
        ("explain gpu-p2p", "what it guards, its fixes, whether --force applies"),
        ("explain restart-not-always --json", "the same for a script"),
    ),
    "version": (
        ("version", "rigctl's version and Python's"),
        ("--host box2 version", "and the version of the rigctl on box2"),
    ),
    "fleet": (
        ("fleet status --hosts hosts.yaml", "what every host serves"),
        ("fleet doctor --fix --limit gpu", "each host's own doctor --fix"),
    ),
    "fleet status": (
        ("fleet status --hosts hosts.yaml", "what every host serves"),
        ("fleet status --hosts inventory.ini --limit 'gpu:!gpu03'", "an Ansible inventory and --limit"),
        ("--hosts hosts.yaml fleet status", "the inventory given before the command"),
    ),
    "fleet doctor": (
        ("fleet doctor --hosts hosts.yaml", "audit every host"),
        ("fleet doctor --fix --tag pro6000", "and fix rigctl's units on those hosts"),
    ),
    "fleet preflight": (
        ("fleet preflight glm53-flash --hosts hosts.yaml", "can it run on each host?"),
    ),
    "fleet swap": (
        ("fleet swap qwen3-8b-vllm glm53-flash --limit gpu01", "swap on one host"),
    ),
}


# what `rigctl --help` ends with: a first session on a new box
ROOT_EXAMPLES: tuple[tuple[str, str], ...] = (  # short: click keeps these lines whole in a 60-column terminal
    ("recipes", "what can be served"),
    ("preflight glm53-flash", "can it run here?"),
    ("up glm53-flash", "deploy and smoke-test it"),
    ("status", "what this host serves"),
    ("explain gpu-p2p", "what a check guards, why"),
    ("COMMAND --help", "its options and examples"),
)


def root_epilog() -> str:
    """The root help's "Examples:" section."""
    return _examples(ROOT_EXAMPLES)


def epilog(command: str) -> str | None:
    """The help's "Examples:" section for ``command`` (``\\b``: click keeps these lines as they are)."""
    rows = EXAMPLES.get(command)
    return _examples(rows) if rows else None


def _examples(rows: tuple[tuple[str, str], ...]) -> str:
    width = max(len(args) for args, _ in rows) + len("rigctl ")
    lines = [f"{'rigctl ' + args:<{width}}  # {what}" for args, what in rows]
    return "Examples:\n\n\b\n" + "\n".join(lines)
