"""rigctl version | checks | explain: about rigctl itself and what it checks."""

from __future__ import annotations

from rigctl.cli import options as opt
from rigctl.cli.checklist import KINDS, all_checks, find
from rigctl.cli.output import Outcome
from rigctl.cli.root import app, finish, usage_error
from rigctl.cli.views.meta import checks_list, explain, version
from rigctl.util.text import version_facts


@app.command("version")
def version_cmd(as_json: opt.JsonOpt = False) -> None:
    """rigctl's version and Python's. `rigctl --host NAME version` adds the version of the rigctl on that
    host and warns when the two differ."""

    def produce() -> Outcome:
        payload = version_facts()
        return Outcome("version", True, payload, view=version(payload))

    finish("version", as_json, produce)


@app.command("checks")
def checks_cmd(kind: opt.KindOpt = None, as_json: opt.JsonOpt = False) -> None:
    """List every check rigctl runs (preflight, verify, doctor) with its id and what it guards."""

    def produce() -> Outcome:
        if kind is not None and kind not in KINDS:
            raise usage_error(f"no kind {kind!r}", kind, KINDS, f"--kind takes {', '.join(KINDS)}")
        found = [c for c in all_checks() if kind is None or c.kind == kind]
        return Outcome("checks", True, {"checks": found}, view=checks_list(found))

    finish("checks", as_json, produce)


@app.command("explain")
def explain_cmd(check_id: opt.CheckIdArg, as_json: opt.JsonOpt = False) -> None:
    """Say more about one check: what it guards and why, what it finds, whether `--force ID` applies, and
    the fixes it suggests."""

    def produce() -> Outcome:
        found = find(check_id)
        if not found:
            known = [c.id for c in all_checks()]
            raise usage_error(f"no check {check_id!r}", check_id, known, "`rigctl checks` lists them")
        return Outcome("explain", True, {"checks": found}, view=explain(found))

    finish("explain", as_json, produce)
