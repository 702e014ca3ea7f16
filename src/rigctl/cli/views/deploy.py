"""What `up` (and its dry run), `status`, `logs`, `down` and `swap` print for a person."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from rigctl.cli.output import quiet
from rigctl.cli.views.canary import canary_lines
from rigctl.cli.views.draw import View, duration, paths, prose
from rigctl.cli.views.reports import preflight, preflight_result
from rigctl.severity import Severity
from rigctl.util.text import LINE_LIMIT, printable

if TYPE_CHECKING:
    from rigctl.deploy.down import DownResult
    from rigctl.deploy.logs import LogLine
    from rigctl.deploy.status import ServiceStatus
    from rigctl.deploy.swap import SwapResult
    from rigctl.deploy.up import UpResult
    from rigctl.findings import Finding
    from rigctl.plan.plan import Plan
    from rigctl.verify.signatures import SignatureMatch


def plan(planned: Plan, inventory: str | None, *, hint: str | None = None) -> View:
    """The plan `up` would carry out: preflight, the GPUs, the rendered unit and its notes. ``hint``: what
    to type instead (another scope), beside the problem it answers."""
    from rigctl.podman_versions import fmt

    def view(out: TextIO) -> None:
        preflight(planned.report, planned.recipe.name, hint=None if planned.render_error else hint)(out)
        where = f"inventory {inventory}" if inventory else "this host"
        quadlet = f" with quadlet {fmt(planned.quadlet_version)}" if planned.quadlet_version else ""
        out.write("\n")
        prose(out, f"planned on {where} for the {planned.scope} manager: podman {fmt(planned.podman_version)}"
                   f"{quadlet}")
        for g in planned.report.choice.gpus:
            out.write(f"  would use GPU {g.index}: {printable(g.name)} ({printable(g.uuid)})\n")
        for reason in planned.report.choice.problems:
            prose(out, printable(reason, LINE_LIMIT), first="  layout: ")
        if planned.rendered is not None:
            for f in planned.rendered.files:
                out.write("\n")  # the path is one word: a comment line that wraps only between words
                what = "would install" if planned.ok else "would be installed once preflight passes"
                prose(out, f"{what}: {planned.unit_dir}/{f.name} (unit {planned.rendered.service_name})",
                      first="# ", rest="#   ")
                out.write(f.text)
            for note in planned.rendered.notes:
                prose(out, printable(note.message, LINE_LIMIT), first=f"# render note ({note.kind}): ", rest="#   ")
        if planned.render_error:
            out.write("\n")
            prose(out, printable(planned.render_error, LINE_LIMIT), first="cannot render the unit: ", rest="  ")
            if hint:
                prose(out, printable(hint, LINE_LIMIT), first="hint: ")
        for note_line in planned.notes:
            out.write("\n")
            prose(out, printable(note_line, LINE_LIMIT))
        out.write("\ndry run: nothing was installed or started\n")

    return view


def plan_result(planned: Plan, *, hint: str | None = None) -> View:
    """--quiet: what stops `up` (failed checks, a unit that cannot be rendered, the hint), then one
    verdict line: the unit file it would install, or that it would install nothing."""

    def view(out: TextIO) -> None:
        preflight_result(planned.report)(out)
        if planned.render_error:
            prose(out, printable(planned.render_error, LINE_LIMIT), first="cannot render the unit: ", rest="  ")
        if hint:
            prose(out, printable(hint, LINE_LIMIT), first="hint: ")
        if planned.ok and planned.rendered is not None:
            out.write(f"would install {planned.unit_dir}/{planned.rendered.container_file.name}\n")
        else:
            out.write("would install nothing\n")

    return view


def _findings(out: TextIO, findings: Sequence[Finding]) -> None:
    """Findings as lines (`up` shows only those worth reading: failures, errors and warnings)."""
    for f in findings:
        out.write(f"  {f.severity:<5} {f.id}: {f.message}\n")
        if f.fix:
            out.write(f"        fix: {f.fix}\n")


def _signatures(out: TextIO, signatures: Sequence[SignatureMatch]) -> None:
    for s in signatures:
        out.write(f"  known crash signature '{s.id}': {printable(s.line, LINE_LIMIT)}\n")
        out.write(f"    meaning: {s.meaning}\n    remedy:  {s.remedy}\n")
        if s.link:
            out.write(f"    see:     {s.link}\n")


_DONE = {"unchanged": "already deployed and healthy; nothing changed", "installed": "installed and started",
         "replaced": "unit changed: replaced and restarted", "restarted": "restarted (was not healthy)",
         "started": "started", "attached": "was already warming up; watched it to ready"}


def up(r: UpResult, *, hint: str | None = None) -> View:
    def view(out: TextIO) -> None:
        if r.action == "refused":
            out.write(f"{r.recipe}: preflight refused the deployment (nothing installed):\n")
            _findings(out, [f for f in r.preflight if f.severity.failing or f.severity is Severity.WARN])
            out.write("  (--force ID,... downgrades a forceable failure to a warning)\n")
            if hint:
                prose(out, printable(hint, LINE_LIMIT), first="  hint: ")
            return
        _findings(out, [f for f in r.preflight if f.severity is Severity.WARN])
        w = r.wait
        if w is not None and w.status != "ready":
            _failed_warmup(out, r)
            return
        out.write(f"{r.recipe}: {_DONE.get(r.action, r.action)}\n")
        out.write(f"  endpoint  {r.endpoint}/v1  (model {r.served_name})\n")
        out.write(f"  unit      {r.unit} ({r.scope}) from {', '.join(r.unit_files)}\n")
        if w is not None:
            out.write(f"  ready in  {w.elapsed_s:.1f}s\n")
        out.write(f"  restarts  {r.restarts}\n")
        if r.max_model_len_warning:
            out.write(f"  warning   {r.max_model_len_warning}\n")
        if r.memory:
            from rigctl.deploy.memory import view as memory_view

            memory_lines(out, memory_view(r.memory) or {})
        for note in () if quiet() else r.render_notes:  # --quiet: the result without the notes
            prose(out, printable(note.message, LINE_LIMIT), first=f"  note      {note.kind}: ", rest=" " * 12)
        if r.checks is not None:
            for c in r.checks.results:
                out.write(f"  {c.status:<5} {c.id}: {c.message}\n")
            _signatures(out, r.signatures)
        if not r.ok:
            out.write(f"  {r.message}\n")

    return view


def _failed_warmup(out: TextIO, r: UpResult) -> None:
    w = r.wait
    assert w is not None
    out.write(f"{r.recipe}: {w.status.upper()} after {w.elapsed_s:.1f}s in phase '{w.phase}': "
              f"{printable(w.detail, LINE_LIMIT)}\n")
    out.write(f"  unit {r.unit} ({r.scope}); " + (
        "stopped so it does not restart-loop; the unit file stays installed\n" if r.stopped_after_failure
        else "left to systemd\n"))
    if w.tail:
        out.write("  last output:\n")
        for tail_line in w.tail[-15:]:
            out.write(f"    | {printable(tail_line, LINE_LIMIT)}\n")
    _signatures(out, r.signatures)
    if not r.signatures:
        out.write("  no known crash signature of this recipe matched; see `rigctl logs " + r.recipe + "`\n")


def _gib(value: object) -> str:
    return f"{value / 2**30:.1f} GiB" if isinstance(value, int) else "?"


def status(services: Sequence[ServiceStatus], unreadable: Sequence[dict[str, str]] = ()) -> View:
    def view(out: TextIO) -> None:
        for bad in unreadable:
            prose(out, f"{printable(bad['path'], LINE_LIMIT)}: {printable(bad['why'], LINE_LIMIT)} (a deployment "
                       "record that cannot be read counts as failing)", first="UNREADABLE RECORD ", rest="  ")
        if not services:
            out.write("no rigctl-managed services on this host\n")
            return
        for s in services:  # records and unit files are read from disk: their strings shown escaped
            uptime = "-" if s.uptime_s is None else duration(s.uptime_s)
            gpu_mem = "n/a" if s.gpu_memory_mib is None else f"{s.gpu_memory_mib} MiB"
            policy = printable(s.restart_policy)
            verdict = s.verdict.upper() if s.failing else s.verdict
            out.write(f"{printable(s.unit)} ({s.scope})  {verdict}  {printable(s.active)}/{printable(s.sub)}  "
                      f"health {printable(s.health)}\n")
            if s.verdict_detail and s.verdict_detail != s.verdict:
                prose(out, printable(s.verdict_detail, LINE_LIMIT), first="  ")
            restarts = "?" if s.restarts is None else s.restarts  # None: the manager did not say
            said = " in the unit file" if s.restart_policy_from == "unit file" else ""  # the manager did not say
            out.write(f"  restarts {restarts} (Restart={policy or '?'}{said})  up {uptime}  GPU memory {gpu_mem}\n")
            for use in s.gpu_memory or []:
                out.write(f"  GPU {use['gpu']}: {_gib(use.get('used_bytes'))} used of "
                          f"{_gib(use.get('planned_bytes'))} planned\n")
            out.write(f"  endpoint {printable(s.endpoint or '-')}  model {printable(s.model or '-')}\n")
            out.write(f"  image {printable(s.image or '-')}\n")
            if s.restart_policy and s.restart_policy != "always":
                prose(out, f"Restart={policy}: an engine that exits 0 on a crash stays down; use Restart=always",
                      first="  warning: ", rest="    ")
            if s.last_failure:
                lf = s.last_failure
                out.write(f"  last failed warmup: {printable(lf.get('status'))}: "
                          f"{printable(lf.get('detail'), LINE_LIMIT)} (signatures: "
                          f"{printable(', '.join(map(str, lf.get('signatures') or [])) or 'none')})\n")
            _learnt_lines(out, s)
        failing = [s for s in services if s.failing]
        if failing:
            # a serving model whose canary fails or stopped running is failing too, said as such
            names = [printable(s.unit) + (" (canary failing)" if s.canary and s.canary.get("failing") else "")
                    for s in failing]
            prose(out, f"{len(failing)} of {len(services)} service(s) failing: {', '.join(names)} "
                       "(`rigctl logs NAME` says why)", rest="  ")

    return view


def _learnt_lines(out: TextIO, s: ServiceStatus) -> None:
    """The last boot and the canary, when the deployment's history has them (``deploy.history`` read their
    numbers typed and bounded)."""
    import time

    if s.last_boot:
        b = s.last_boot
        out.write(f"  last boot: {printable(b.get('status'))} in {duration(b.get('total_s') or 0)} "
                  f"({time.strftime('%Y-%m-%d %H:%M', time.localtime(b.get('at') or 0))})\n")
    if s.canary:
        canary_lines(out, s.canary)
    if s.memory:
        memory_lines(out, s.memory)
    if s.host_drift:
        prose(out, "the host changed since it was planned: " + printable("; ".join(s.host_drift), LINE_LIMIT)
              + f" (`rigctl preflight {printable(s.recipe or '')}`, then `rigctl up` records it again)",
              first="  warning: ", rest="    ")
    for note in s.host_drift_not_compared or []:
        prose(out, printable(note, LINE_LIMIT), first="  note: ", rest="    ")
    cache = s.engine_cache
    if cache:
        boots = cache.get("boots") or {}
        said = ", ".join(f"last {kind} boot {duration(b['total_s'])}" for kind, b in sorted(boots.items()))
        held = "empty" if not cache.get("bytes") else \
            f"{_gib(cache['bytes'])}{'' if cache.get('complete') else ' or more'} in {cache.get('files'):,} files"
        prose(out, f"engine cache {printable(cache['dir'], LINE_LIMIT)}: {held}" + (f"; {said}" if said else ""),
              first="  ", rest="    ")


def memory_lines(out: TextIO, memory: dict[str, Any]) -> None:
    """The memory plan against the last boot's receipt, per GPU and per part."""
    planned, got = memory.get("planned") or {}, memory.get("receipt") or {}
    low, high = planned.get("kv_budget_low_bytes"), planned.get("kv_budget_high_bytes")
    budget = _gib(low) if low == high else f"{_gib(low)} to {_gib(high)}"
    rows = [("KV budget", budget if planned else "-", _gib(got.get("kv_available_bytes"))),
            ("weights", _gib(planned.get("weights_high_bytes")) if planned else "-", _gib(got.get("weights_bytes")))]
    if got.get("graphs_bytes") is not None:
        rows.append(("CUDA graphs", "-", _gib(got["graphs_bytes"])))
    if got.get("kv_tokens") is not None:
        rows.append(("KV tokens", "-", f"{got['kv_tokens']:,}"))
    out.write("  memory per GPU (planned / the engine at boot):"
              + (" planned from an earlier boot's receipt" if planned.get("from_receipt") else "") + "\n")
    for name, plan_text, got_text in rows:
        out.write(f"    {name:<12} {plan_text:<22} {got_text}\n")
    if memory.get("disagrees"):
        prose(out, f"outside the plan's margin: {printable(memory['disagrees'], LINE_LIMIT)}", first="  warning: ",
              rest="    ")


def logs(lines: Sequence[LogLine]) -> View:
    def view(out: TextIO) -> None:
        log_lines(out, lines)
        if not lines:
            out.write("(no output: the container is not running and no journal keeps its output)\n")

    return view


def log_lines(out: TextIO, lines: Sequence[LogLine], *, source: str | None = None) -> str | None:
    """Write log lines, a known crash signature highlighted and explained; ``source`` is the source of the
    line written before (`logs -f` prints a stream line by line). Returns the source of the last line."""
    color = out.isatty()
    for ln in lines:
        if ln.source != source and ln.source == "last-failure":
            out.write("--- output of the last failed warmup, kept by rigctl ---\n")
        elif ln.source != source and source == "last-failure":
            out.write("--- current container ---\n")
        source = ln.source
        text = printable(ln.text, None)  # the engine's output: its escape sequences are shown, not obeyed
        if ln.signature is None:
            out.write(text + "\n")
            continue
        marked = f"\x1b[1;31m{text}\x1b[0m" if color else f">> {text}"
        out.write(f"{marked}\n   [{ln.signature.id}] {ln.signature.meaning}\n   remedy: {ln.signature.remedy}\n")
    out.flush()
    return source


def down(result: DownResult) -> View:
    def view(out: TextIO) -> None:
        out.write(f"{result.recipe}: {result.message}\n")
        paths(out, "removed", result.removed)
        paths(out, "removed", result.canary_removed, "canary")
        if not result.gpu_ids:
            out.write("  GPUs: none in this layout\n")
        elif result.gpus_released is None:
            out.write(f"  GPUs {','.join(result.gpu_ids)}: release not verifiable here (no NVML)\n")
        else:
            out.write(f"  GPUs {','.join(result.gpu_ids)}: "
                      + ("released\n" if result.gpus_released else "STILL IN USE by some process\n"))

    return view


def swap(result: SwapResult) -> View:
    def view(out: TextIO) -> None:
        for step in result.steps:
            out.write(f"  {'ok  ' if step.ok else 'FAIL'} {step.name:<15} {step.message}\n")
        if result.outcome == "rollback-failed":
            out.write("\n" + "!" * 78 + f"\n!! {result.message}\n" + "!" * 78 + "\n")
            out.write("what to do now:\n")
            for item in result.todo:
                out.write(f"  - {item}\n")
            return
        out.write(f"{result.outcome}: {result.message}\n")

    return view
