"""The root help (`rigctl --help`) as typer renders it in a terminal of 80 columns or more, kept here so
that printing it loads no command and not typer (``rigctl.cli.app``). tests/cli/test_lazy_commands.py
keeps it equal to typer's own rendering; after a command or its help changes, regenerate it:

    uv run python -m rigctl.cli.roothelp
"""

from __future__ import annotations

ROOT_HELP = """\
Usage: rigctl [OPTIONS] COMMAND [ARGS]...

  Make self-hosted LLM serving boring: recipes, preflight, quadlet units,
  verification.

Options:
  --host NAME           Run the command on this inventory host over ssh.
  --hosts FILE          Host inventory for --host and the fleet commands
                        (default $XDG_CONFIG_HOME/rigctl/hosts.yaml).
  --allow-ssh-commands  With --host: let the inventory's ssh options run local
                        commands (ProxyCommand and the like).
  -q, --quiet           Print only the result and errors: no notes, no
                        progress.
  -v, --verbose         Also print each command rigctl runs (podman,
                        systemctl, ssh).
  --version             Print rigctl's version and exit.
  --install-completion  Install completion for the current shell.
  --show-completion     Show completion for the current shell, to copy it or
                        customize the installation.
  -h, --help            Show this message and exit.

Commands:
  up         Deploy a recipe: preflight, install, start, warm up, verify
  status     Every rigctl-managed service here: state, health, GPU memory
  logs       The engine's output, with known crash signatures explained
  down       Stop a service and say whether its GPUs were released
  doctor     Audit every serving unit on this host (--fix rewrites them)
  swap       Replace one served recipe by another, rolling back on failure
  inventory  This host's facts: GPUs, shm, podman, CDI, systemd, ports
  preflight  Check that a recipe can run here, or on a captured inventory
  recipes    List the recipes rigctl can find, each validated
  show       A recipe after overlays and --set, every default filled in
  validate   Check recipes strictly: every problem with its file and line
  new        Write a new user recipe, a copy of another to edit
  schema     Print the recipe JSON Schema, for editors
  render     Render the quadlet unit `up` would install (or kube manifests)
  verify     Check a served model: answers, loops, context, a soak
  canary     Re-verify a deployment on a timer; restart it once on failure
  metrics    Every deployment as Prometheus text (or a node_exporter file)
  checks     List every check rigctl runs and what it guards
  explain    One check: what it guards and why, its fixes, --force
  version    rigctl's version and Python's
  fleet      status, doctor, preflight or swap on every inventory host

  Examples:

  rigctl recipes                # what can be served
  rigctl preflight glm53-flash  # can it run here?
  rigctl up glm53-flash         # deploy and smoke-test it
  rigctl status                 # what this host serves
  rigctl explain gpu-p2p        # what a check guards, why
  rigctl COMMAND --help         # its options and examples
"""


def typer_root_help() -> str:
    """What typer prints for `rigctl --help` at the widest layout, every command registered."""
    import typer.main  # noqa: PLC0415 - only to regenerate or check the copy above

    from rigctl.cli.app import app  # noqa: PLC0415 - registers every command

    group = typer.main.get_command(app)
    with group.make_context("rigctl", ["--help"], resilient_parsing=True, terminal_width=78) as ctx:
        return group.get_help(ctx) + "\n"


def main() -> None:  # pragma: no cover - a maintainer's tool
    from pathlib import Path  # noqa: PLC0415

    path = Path(__file__)
    text = path.read_text(encoding="utf-8")
    start = text.index('ROOT_HELP = """\\\n') + len('ROOT_HELP = """\\\n')
    end = text.index('"""\n', start)
    new = typer_root_help()
    if '"""' in new or "\\" in new:
        raise SystemExit("the help text holds a quote triple or a backslash: store it another way")
    from rigctl.util.safefs import write_own  # noqa: PLC0415 - the one atomic writer

    write_own(path, text[:start] + new + text[end:])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
