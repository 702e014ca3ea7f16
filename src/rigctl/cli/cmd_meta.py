"""rigctl version | schema | new | checks | explain: about rigctl itself and what it checks."""

from __future__ import annotations

import platform
from typing import Any

from rigctl.cli import options as opt
from rigctl.cli.base import ROOT, app, finish
from rigctl.cli.output import Outcome
from rigctl.util.text import VERSION


def _local() -> dict[str, Any]:
    return {"version": VERSION, "python": platform.python_version()}


@app.command("version")
def version_cmd(as_json: opt.JsonOpt = False) -> None:
    """rigctl's version and Python's. `rigctl --host NAME version` adds the version of the rigctl on that
    host and warns when the two differ."""

    def produce() -> Outcome:
        from rigctl.cli.views.meta import version

        payload = _local()
        return Outcome("version", True, payload, view=version(payload))

    finish("version", as_json, produce)


def version_on_host(hosts_file: str | None, host: str, as_json: bool) -> None:
    """`rigctl --host NAME version`: this rigctl's version and the host's, side by side."""

    def produce() -> Outcome:
        from rigctl.cli.views.meta import version
        from rigctl.fleet.inventory import load_inventory
        from rigctl.fleet.remote import RemoteAnswerError, remote_version, run_remote_rigctl

        allow = ROOT.allow_ssh_commands  # --allow-ssh-commands before the command
        target = load_inventory(hosts_file).get(host, allow_ssh_commands=allow)
        answer = run_remote_rigctl(target, ["version"], allow_ssh_commands=allow)
        if answer.problem is not None or answer.document is None:
            raise RemoteAnswerError(answer.failure(target, "version"))
        said = remote_version(answer.document)
        python = answer.document.get("python")
        remote = {"version": said, "python": python if isinstance(python, str) else "unknown"}
        payload = {**_local(), "host": host, "remote": remote, "skew": said != VERSION}
        return Outcome("version", True, payload, view=version(payload))

    finish("version", as_json, produce)


@app.command("schema")
def schema_cmd(name: opt.SchemaNameArg, out: opt.SchemaOutOpt = None, as_json: opt.JsonOpt = False) -> None:
    """Print the JSON Schema of a recipe, for editors: yaml-language-server checks a recipe as you type
    when its first line is `# yaml-language-server: $schema=PATH`."""

    def produce() -> Outcome:
        from rigctl.cli.views.meta import schema
        from rigctl.recipe.schema import SCHEMA_NAMES, recipe_schema, schema_text

        if name not in SCHEMA_NAMES:
            raise _usage(f"no schema {name!r}", name, SCHEMA_NAMES, "`rigctl schema recipe` is the one there is")
        document = recipe_schema()
        path = None
        if out is not None:
            from rigctl.util.safefs import SafeDir

            with SafeDir.open(out.parent) as directory:  # the directory is the user's, trusted as given
                directory.write_atomic(out.name, schema_text(document).encode())
            path = str(out)
        return Outcome("schema", True, {"name": name, "path": path, "schema": document}, view=schema(document, path))

    finish("schema", as_json, produce)


@app.command("new")
def new_cmd(
    name: opt.NewNameArg, source: opt.NewFromOpt, out: opt.NewOutOpt = None, as_json: opt.JsonOpt = False,
) -> None:
    """Write a new user recipe to start from: a copy of RECIPE named NAME, with the schema comment on top,
    into $XDG_CONFIG_HOME/rigctl/recipes (never over an existing file). The recipe schema goes beside it,
    unless a file of that name that is not rigctl's schema is there: that is left alone, and said."""

    def produce() -> Outcome:
        from rigctl.cli.output import note, printable
        from rigctl.cli.views.meta import new
        from rigctl.recipe.scaffold import new_recipe

        made = new_recipe(name, source, out=out)
        if not made.schema_written:
            note(f"rigctl new: left {printable(made.schema)} alone: {printable(made.schema_problem or '')}; "
                 "`rigctl schema recipe --out FILE` writes the schema where you choose")
        return Outcome("new", True, made.to_dict(), view=new(made))

    finish("new", as_json, produce)


@app.command("checks")
def checks_cmd(kind: opt.KindOpt = None, as_json: opt.JsonOpt = False) -> None:
    """List every check rigctl runs (preflight, verify, doctor) with its id and what it guards."""

    def produce() -> Outcome:
        from rigctl.cli.checklist import KINDS, all_checks
        from rigctl.cli.views.meta import checks_list

        if kind is not None and kind not in KINDS:
            raise _usage(f"no kind {kind!r}", kind, KINDS, f"--kind takes {', '.join(KINDS)}")
        found = [c for c in all_checks() if kind is None or c.kind == kind]
        return Outcome("checks", True, {"checks": [c.to_dict() for c in found]}, view=checks_list(found))

    finish("checks", as_json, produce)


@app.command("explain")
def explain_cmd(check_id: opt.CheckIdArg, as_json: opt.JsonOpt = False) -> None:
    """Say more about one check: what it guards and why, what it finds, whether `--force ID` applies, and
    the fixes it suggests."""

    def produce() -> Outcome:
        from rigctl.cli.checklist import all_checks, find
        from rigctl.cli.views.meta import explain

        found = find(check_id)
        if not found:
            known = [c.id for c in all_checks()]
            raise _usage(f"no check {check_id!r}", check_id, known, "`rigctl checks` lists them")
        return Outcome("explain", True, {"checks": [c.to_dict() for c in found]}, view=explain(found))

    finish("explain", as_json, produce)


def _usage(message: str, given: str, known: Any, then: str) -> Exception:
    """A usage error (exit 2) naming the closest known words, then ``then``."""
    import difflib

    from rigctl.errors import UsageError
    from rigctl.util.text import printable

    close = difflib.get_close_matches(given, list(known), n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return UsageError(printable(message), fix=f"{hint}{then}")
