"""Every text view of rigctl, in one place. A command module parses options, calls one core function and
hands ``Outcome(..., view=views.<name>(result))`` to ``finish``; the view writes the result for a person
when ``--json`` was not given. Progress drawn while a command runs lives here too (``views.progress``).

Views print values that came from files, NVML, engines and other hosts: every such value goes through
``printable`` (or ``shown`` for remote text) before it reaches a terminal. rich loads only when a view
draws in colour; a pipe gets plain text (``cli.plaintable`` for tables).
"""

from __future__ import annotations

from rigctl.cli.views import progress
from rigctl.cli.views.deploy import down, log_lines, logs, plan, plan_result, status, swap, up
from rigctl.cli.views.doctor import doctor, fleet, inventory_lines, inventory_notes
from rigctl.cli.views.draw import View
from rigctl.cli.views.recipes import recipes, show, validate
from rigctl.cli.views.render import kube, quadlet
from rigctl.cli.views.reports import facts, preflight, preflight_result, verify

__all__ = [
    "View", "doctor", "down", "facts", "fleet", "inventory_lines", "inventory_notes", "kube", "log_lines", "logs",
    "plan", "plan_result", "preflight", "preflight_result", "progress", "quadlet", "recipes", "show", "status", "swap",
    "up", "validate", "verify",
]
