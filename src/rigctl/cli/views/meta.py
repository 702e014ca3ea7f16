"""What `version`, `schema`, `new`, `checks` and `explain` print. All of it is rigctl's own text, except a
remote rigctl's version and Python (checked by the fleet's reader) and file paths (shown printable)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from rigctl.cli.views.draw import View, last_column, prose
from rigctl.cli.views.draw import columns as draw_columns
from rigctl.util.text import columns, printable

if TYPE_CHECKING:
    from rigctl.cli.checklist import CheckInfo, KnownBadTable
    from rigctl.recipe.scaffold import NewRecipe


def version(payload: dict[str, Any]) -> View:
    """``payload``: the version command's JSON (``remote`` and ``skew`` with --host)."""

    def view(out: TextIO) -> None:
        out.write(f"rigctl {payload['version']} (Python {payload['python']})\n")
        remote = payload.get("remote")
        if remote is not None:
            out.write(f"{printable(payload['host'])}: rigctl {printable(remote['version'])} "
                      f"(Python {printable(remote['python'])})\n")
        if payload.get("skew"):
            out.write(f"WARN version skew: {printable(payload['host'])} runs another rigctl than this one; "
                      "install the same version on both\n")

    return view


def schema(document: dict[str, Any], path: str | None) -> View:
    """The schema itself on stdout (it is the artefact), or where it was written."""

    def view(out: TextIO) -> None:
        if path is None:
            out.write(json.dumps(document, indent=2, allow_nan=False) + "\n")
            return
        out.write(f"wrote {printable(path)}\n")
        out.write(f"editors use it when a recipe's first line is: # yaml-language-server: $schema={printable(path)}\n")

    return view


def new(made: NewRecipe) -> View:
    def view(out: TextIO) -> None:
        out.write(f"wrote {printable(made.path)} (from {printable(made.source)})\n")
        if made.schema_written:  # else stderr said why the file there was left alone
            out.write(f"schema {printable(made.schema)} (editors check the recipe against it as you type)\n")
        for note in made.notes:
            out.write(f"note: {printable(note, None)}\n")
        out.write(f"next: edit it, then `rigctl validate {made.name}` and `rigctl up {made.name} --dry-run`\n")

    return view


def checks_list(checks: Sequence[CheckInfo]) -> View:
    """One line per check: its id, kind, whether --force applies, what it guards."""

    def view(out: TextIO) -> None:
        width = max([len(c.id) for c in checks] + [2])
        last_column(out, f"{'ID':<{width}}  {'KIND':<9}  {'FORCE':<5}  ", "GUARDS")
        for c in checks:
            force = "-" if c.force is None else ("yes" if c.force else "no")
            last_column(out, f"{c.id:<{width}}  {c.kind:<9}  {force:<5}  ", c.summary)
        for c in checks:
            if c.table is not None:
                out.write("\n")
                _table(out, c.id, c.table, draw_columns(out))
        out.write(f"\n{len(checks)} checks; `rigctl explain ID` says more about one\n")

    return view


def explain(checks: Sequence[CheckInfo]) -> View:
    def view(out: TextIO) -> None:
        width = max(40, min(columns(out, 100), 120))  # the one COLUMNS rule
        for i, c in enumerate(checks):
            if i:
                out.write("\n")
            out.write(f"{c.id} ({c.kind} check)\n")
            _field(out, "guards", c.summary, width)
            if c.about:
                _field(out, "why", c.about, width)
            _field(out, "finds", _severity(c), width)
            if c.fixes:
                out.write("  fixes it suggests (… is filled in from the recipe or host):\n")
                for fix in c.fixes:
                    out.write(textwrap.fill(fix, width, initial_indent="    - ", subsequent_indent="      ") + "\n")
            _field(out, "code", c.source, width)
            if c.table is not None:
                _table(out, c.id, c.table, width)

    return view


def _table(out: TextIO, check_id: str, table: KnownBadTable, width: int) -> None:
    """A check's bundled table, a row to a paragraph: the table is rigctl's own data, so its words are printed
    as they are."""
    prose(out, f"{check_id} judges {len(table.rows)} bundled row(s), extended by {table.extended_by}:", width=width)
    for row in table.rows:
        out.write(f"  - {row.id} ({row.severity})\n")
        for label, text in (("when", row.when), ("breaks", row.problem), ("error", row.error), ("fix", row.fix)):
            if text:
                prose(out, text, first=f"      {label + ':':<8} ", width=width)
        if row.source:  # an address is never cut: where it does not fit beside its label, it goes under it
            first = f"      {'source:':<8} "
            out.write(first + row.source + "\n" if len(first) + len(row.source) <= width
                      else f"      source:\n        {row.source}\n")


def _severity(c: CheckInfo) -> str:
    if c.kind == "verify":
        return "pass, warn or fail; --force does not apply (verify only reports)"
    if c.kind == "doctor":
        return f"{c.severity} at most; --force does not apply (`rigctl doctor --fix` rewrites what it can)"
    if c.force:
        return f"{c.severity} at most; `--force {c.id}` turns its fail into a warning"
    return f"{c.severity} at most; --force does not apply to it"


def _field(out: TextIO, label: str, text: str, width: int) -> None:
    out.write(textwrap.fill(text, width, initial_indent=f"  {label + ':':<8} ", subsequent_indent=" " * 11) + "\n")
