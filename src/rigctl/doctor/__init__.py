"""`rigctl doctor`: audit the serving units already on a box (rigctl's and anyone else's), and fix
rigctl's own.

The call chain, top down: ``checkup.doctor`` finds the unit files (``discover``), gathers host facts
(``host_state``, from the same host probes preflight uses), audits (``audit``, which runs every rule of the
registry in ``rules``) and, with ``--fix``, plans edits (``fix.plan_fixes``) and writes them
(``fix.rewrite``). ``serving`` reads what a unit serves; the unit files themselves are parsed by
``rigctl.host.unitfile``, the one parser.
"""
