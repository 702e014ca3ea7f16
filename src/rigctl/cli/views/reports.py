"""Host facts (`inventory`) and the two check reports: preflight's findings and verify's checks, drawn as
the same table (id, result, message) with the result in its severity's style."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from rigctl.cli import plaintable
from rigctl.cli.views.draw import Cell, View, columns, line, overhead, paragraph, prose, table
from rigctl.severity import Severity
from rigctl.util.text import LINE_LIMIT, printable

if TYPE_CHECKING:
    from rigctl.host.facts import HostFacts
    from rigctl.preflight.registry import PreflightReport
    from rigctl.verify.report import VerifyReport


def facts(found: HostFacts) -> View:
    def view(out: TextIO) -> None:
        # every value below comes from NVML, the host or a captured file: shown through ``printable``
        inv = found.gpu
        if inv.available:
            line(out, f"NVIDIA driver {printable(inv.driver_version)}, CUDA {printable(inv.cuda_version)}, "
                      f"NVML {printable(inv.nvml_version)}")
        else:
            line(out, f"GPUs: none visible ({printable(inv.error)})")
        if inv.devices:
            rows: list[list[str]] = []
            for g in inv.devices:
                used = "-" if g.memory_used_mib is None else f"{g.memory_used_mib:,}"
                procs = f" ({len(g.processes)} procs)" if g.processes else ""
                power = "-" if g.power.current_mw is None else f"{g.power.current_mw / 1000:g}"
                rows.append([str(g.index), printable(g.name), printable(g.pci_device_hex or "-"),
                             f"{g.memory_total_mib or 0:,}", used + procs, printable(g.compute_capability or "-"),
                             power, "on" if g.mig_enabled else "off" if g.mig_enabled is False else "-",
                             printable(g.uuid)])
            headers = ("#", "name", "pci id", "memory MiB", "used", "cc", "power W", "mig", "uuid")
            if sum(plaintable.natural(headers, rows)) + overhead(out, len(headers)) <= columns(out):
                table(out, headers, rows)
            else:  # a UUID is copied whole (--gpus): under its row rather than cut into a narrow column
                table(out, headers[:-1], [row[:-1] for row in rows], below=[f"uuid {row[-1]}" for row in rows])
        if inv.pairs:
            from rigctl.preflight.links import describe_pair

            for p in inv.pairs:
                prose(out, printable(describe_pair(inv, p).text, LINE_LIMIT), rest="  ")
        line(out, f"/dev/shm: {(found.shm.total_bytes or 0) / 2**30:.1f} GiB")
        pod = found.podman
        line(out, f"podman: {printable(pod.version) if pod.installed else 'not installed'}"
                  f"{' (API ' + printable(pod.api_socket) + ')' if pod.api_ok else ''}, {len(pod.images)} image(s), "
                  f"quadlet: {printable(pod.quadlet or 'none')}")
        prose(out, ", ".join(printable(s.path) for s in found.cdi.specs) or "none", first="CDI specs: ", rest="  ")
        sd = found.systemd
        line(out, f"systemd: system manager {'yes' if sd.system_manager else 'no'}, user manager "
                  f"{'yes' if sd.user_manager else 'no'}, linger {sd.linger}")
        for probe in found.paths:
            free = "?" if probe.free_bytes is None else f"{probe.free_bytes / 2**30:,.1f} GiB free"
            prose(out, f"path {printable(probe.path)}: {'present' if probe.exists else 'missing'}, {free} "
                       f"on {printable(probe.probed)}", rest="  ")
        ports = ", ".join(str(x.port) for x in found.ports.listening) or "none"
        prose(out, ports, first="listening ports: ", rest="  ")
        for section, err in found.probe_errors.items():
            line(out, (f"probe {printable(section)} failed: {printable(err, LINE_LIMIT)}", "red"))

    return view


def _counts(report: PreflightReport) -> str:
    counts: dict[str, int] = {}
    for f in report.findings:
        counts[f.severity.value] = counts.get(f.severity.value, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in counts.items())


MESSAGE_BESIDE_FIX = 40  # the narrowest message column a fix column may leave (where messages are that long)
MESSAGE_LEAST = 24  # the narrowest message column at all: narrower, each finding is stacked on lines of its own


def _layout(out: TextIO, plain: list[list[str]], width: int) -> str:
    """How the findings fit ``width``: ``"columns"`` (the fix in a column of its own, wide enough for
    its longest command, beside a message column of at least ``MESSAGE_BESIDE_FIX``), ``"below"`` (each
    fix on full lines under its finding, the message column taking the room) or ``"stacked"`` (too
    narrow even for that: the id and result on a line, message and fix under it)."""
    head = [max([len(h), *(len(row[i]) for row in plain)]) for i, h in enumerate(("check", "result"))]
    message = max([len("message"), *(len(row[2]) for row in plain)])
    fixes = [row[3] for row in plain]
    fix = max(plaintable.least(fixes), plaintable.READABLE, len("fix")) if any(fixes) else len("fix")
    if sum(head) + min(message, MESSAGE_BESIDE_FIX) + fix <= width - overhead(out, 4):
        return "columns"
    if width - overhead(out, 3) - sum(head) >= min(message, MESSAGE_LEAST):
        return "below"
    return "stacked"


def preflight(report: PreflightReport, recipe_name: str, *, hint: str | None = None) -> View:
    """The findings as a table (finding messages quote GPU and process names: shown through printable),
    the GPUs the layout chose, and the verdict with the count of each result. The message column gets
    the room: a fix (it holds the command to copy) has a column of its own only where that column can
    hold each command whole and still leave the message readable, else it is a line under its finding
    (``_layout``). ``hint``: what to type instead (another scope), under the verdict. Every line is
    wrapped within ``columns``; only a command longer than the width overflows it."""

    def view(out: TextIO) -> None:
        rows: list[list[Cell]] = [
            [printable(f.id), (f.severity.value, f.severity), printable(f.message, LINE_LIMIT),
             printable(f.fix or "", LINE_LIMIT)]
            for f in report.findings
        ]
        title = f"preflight {printable(recipe_name)}"
        headers = ("check", "result", "message", "fix")
        width = columns(out)
        plain = [[c if isinstance(c, str) else c[0] for c in row] for row in rows]
        layout = _layout(out, plain, width)
        if layout == "columns":
            table(out, headers, rows, title=title, width=width, keep=2, minimum=(0, 0, MESSAGE_BESIDE_FIX, 0))
        elif layout == "below":
            below = [f"fix: {row[3]}" if row[3] else None for row in plain]
            table(out, headers[:3], [row[:3] for row in rows], title=title, width=width, below=below, keep=2,
                  minimum=(0, 0, MESSAGE_LEAST))
        else:
            line(out, title)
            for row, text in zip(rows, plain, strict=True):
                line(out, row[0], "  ", row[1])
                for part in plaintable.hanging(text[2], width, first="    ", rest="    "):
                    line(out, part)
                if text[3]:
                    for part in plaintable.hanging(f"fix: {text[3]}", width, first="    ", rest="         "):
                        line(out, part)
        if report.choice.gpus:
            paragraph(out, "GPUs", ", ".join(f"{g.index} {printable(g.name)} {printable(g.uuid)}"
                                             for g in report.choice.gpus), width=width)
        verdict = ("ready", "green") if report.ok else ("not ready", "bold red")
        line(out, verdict, f": {_counts(report)}")
        if hint:
            paragraph(out, ("hint", "cyan"), printable(hint, LINE_LIMIT), width=width)

    return view


def preflight_result(report: PreflightReport) -> View:
    """--quiet: what failed and what warns (each with its fix) and the verdict, as plain lines a script
    can read: quiet leaves out what passed or was skipped, never a warning."""

    def view(out: TextIO) -> None:
        for f in report.findings:
            if f.severity.failing or f.severity is Severity.WARN:
                out.write(f"{f.severity.value} {printable(f.id)}: {printable(f.message, LINE_LIMIT)}\n")
                if f.fix:
                    out.write(f"  fix: {printable(f.fix, LINE_LIMIT)}\n")
        out.write(f"{'ready' if report.ok else 'not ready'}: {_counts(report)}\n")

    return view


def verify(report: VerifyReport) -> View:
    """The checks as a table (messages quote the server: error bodies, model names; TIME is each check's
    whole run), the engine spoken, the soak's figures (its streams' own span beside the check's time), and
    the verdict."""

    def view(out: TextIO) -> None:
        rows: list[list[Cell]] = [
            [printable(c.id), (c.status, c.severity), f"{c.duration_s:.1f}s", printable(c.message, LINE_LIMIT)]
            for c in report.checks
        ]
        table(out, ("CHECK", "STATUS", "TIME", "RESULT"), rows,
              title=f"verify {printable(report.endpoint.model)} at {printable(report.endpoint.base_url)}")
        info = report.engine
        if info:
            context = info.get("context_source") or "not reported by the engine"
            doubt = f"; {info['tokenizer_doubt']}" if info.get("tokenizer_doubt") else ""
            line(out, printable(f"engine: {info['dialect']} ({info['detection']}); context {context}{doubt}",
                                LINE_LIMIT))
        soak = report.get("soak")
        if soak is not None and soak.figures.get("completed"):
            # Two clocks: the TIME column is the whole check (sizing the prefix, the solo baselines, the
            # concurrent streams, the health polls after); the rates are over the streams' span alone.
            f = soak.figures
            paragraph(out, "soak", f"{f['completed']} completed, {f['failed']} failed; the concurrent streams "
                      f"took {f['duration_s']:.3f} s of the check's {soak.duration_s:.1f} s (the rest: sizing the "
                      f"prefix, solo baselines, health after); TTFT p50/p99 {f['median_ttft_ms']}/"
                      f"{f['p99_ttft_ms']} ms, ITL p50/p99 {f['median_itl_ms']}/{f['p99_itl_ms']} ms, E2E p50/p99 "
                      f"{f['median_e2el_ms']}/{f['p99_e2el_ms']} ms, {f['output_throughput']} output tok/s "
                      "over the streams")
        if report.ok:
            line(out, "verify: ", ("OK", "green"))
        else:
            line(out, "verify: ", ("FAILED", "bold red"), f" ({', '.join(c.id for c in report.checks if c.fails)})")

    return view
