"""Liveness from the engine's own token counters: an engine that has requests running and has produced no
token for a while is hung (vllm-project/vllm#39863: /health stays 200 while completions never answer), and
the unit's health check fails for it, so podman kills the container and systemd starts it again.

The rule is ``judge``, pure; ``liveness_prefix`` is the same rule in POSIX sh, run inside the container
before the plain /health check (``units.health_check_cmd``). Between checks it keeps one line in a file
under the container's own /tmp (gone with the container, so a restart starts afresh): whether work ran and
the counters' values as last seen changed, and when; it is written to a temporary and renamed over the
old one, so a check killed mid-write leaves the old line.

Timing. ``window_s`` is the promise: an engine that stops producing tokens with requests running is
killed within it. With R failures in a row needed (HEALTH_RETRIES) and checks P apart (P: the interval I
and the check's own run time, CHECK_RUN_S), the first check that saw the counters as they stay is at most
P after the last token (or the work's start), the first failing check at most P after the stall limit S
from there, and the kill R-1 checks later: at most S + (R+1)*P after the last token. So P is
window/(2(R+1)) (I at most the plain check's 30 s) and S = window - (R+1)*P, at least half the window:
a long prefill without a generated token must not look like a hang.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rigctl.recipe import defaults

__all__ = [
    "PROGRESS_METRICS", "Progress", "ProgressMetrics", "Sample", "judge", "liveness_prefix", "parse_metrics",
    "timing",
]


@dataclass(frozen=True)
class ProgressMetrics:
    """The Prometheus series that tell an engine's work and its progress."""

    running: str  # a gauge: requests being executed now
    tokens: str  # a counter: tokens generated so far


# By engine kind. vLLM (v0 and v1) counts generated tokens per engine step, so the counter moves while a
# request streams. SGLang has sglang:num_running_reqs, but its sglang:generation_tokens_total grows only
# when a request finishes (TokenizerMetricsCollector.observe_one_finished_request) and /metrics exists
# only with --enable-metrics: one long answer would look hung, so SGLang gets the plain /health check.
# TabbyAPI has no such metrics.
PROGRESS_METRICS: dict[str, ProgressMetrics] = {
    "vllm": ProgressMetrics(running="vllm:num_requests_running", tokens="vllm:generation_tokens_total"),
}

MIN_WINDOW_S = defaults.LIVENESS_MIN_WINDOW_S  # below it the check interval would round to 0 s
# podman starts the next check an interval after the last one ended, by a systemd timer that may fire late,
# and a check (podman healthcheck run, the exec, python3 or curl for /metrics) takes its own time: with 1 s
# intervals the podman 5 testbed's checks came about 2 s apart (a 12 s window's kill came at 17 s before this
# was counted; with 1 s counted, a 24 s window's at 23.98 s). Each check is counted as taking this much more.
CHECK_RUN_S = 2
STATE_DIR = "/tmp"  # the container's own, not /dev/shm: with ipc=host that is the host's, shared by all units


@dataclass(frozen=True)
class Sample:
    """What one read of /metrics says: whether any request runs, and the token counters' values (one per
    engine of a data-parallel server, joined; compared as text, so no arithmetic on floats in sh)."""

    running: bool
    tokens: str


@dataclass(frozen=True)
class Progress:
    """What the check keeps between runs: the sample as last seen when it changed, and when (epoch seconds).
    An idle sample is kept as such, so a stall is counted from the first check that saw the work."""

    running: bool
    tokens: str
    since: int


def timing(window_s: int, retries: int, plain_interval_s: int) -> tuple[int, int]:
    """(check interval, stall limit) in seconds for a window (see the module's docstring)."""
    if window_s < MIN_WINDOW_S:
        raise ValueError(f"a liveness window of {window_s} s is below {MIN_WINDOW_S} s")
    period = window_s // (2 * (retries + 1))  # a check's interval and its own run time
    interval = max(1, min(plain_interval_s, period - CHECK_RUN_S))
    return interval, window_s - (retries + 1) * (interval + CHECK_RUN_S)


def _series(name: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(name)}[{{ ]")


def parse_metrics(text: str, metrics: ProgressMetrics) -> Sample:
    """The sample in Prometheus text; a series' value is the line's last field (labels may hold spaces)."""
    running, tokens = _series(metrics.running), _series(metrics.tokens)
    busy = False
    values = []
    for line in text.split("\n"):
        value = line.rstrip().rsplit(" ", 1)[-1]
        if running.match(line):
            busy = busy or value not in ("0", "0.0")
        elif tokens.match(line):
            values.append(value + ",")
    return Sample(busy, "".join(values))


def judge(prev: Progress | None, sample: Sample, now: int, stall_s: int) -> tuple[bool, Progress | None]:
    """(hung, what to keep). Hung: requests run now and ran at the kept sample, whose counters are today's,
    kept at least ``stall_s`` ago. Otherwise not hung, and the sample is kept from now when it differs
    (no work, work that was not there, or tokens moved); an unchanged busy one keeps its time: the stall is
    counted from the first check that saw these counters with work. Without a counter: never hung."""
    if sample.running and sample.tokens and prev is not None and prev.running and prev.tokens == sample.tokens:
        return now - prev.since >= stall_s, prev
    return False, Progress(sample.running, sample.tokens, now)


def liveness_prefix(port: int, stall_s: int, metrics: ProgressMetrics, state_dir: str = STATE_DIR) -> str:
    """``judge`` as POSIX sh, to run before the plain health check: exits 1 (saying why) when hung, and
    otherwise goes on. It needs grep, date and mv (every Debian or Ubuntu based image has them) and
    reads /metrics with curl, else python3, else bash's /dev/tcp; without any of them, or when /metrics
    does not answer within 2 s, it judges nothing and the plain check decides."""
    url = f"http://127.0.0.1:{port}/metrics"
    fetch = (f"if command -v curl >/dev/null; then curl -s -m 2 {url}; "
             f"elif command -v python3 >/dev/null; then python3 -c 'import sys, urllib.request as u; "
             f"sys.stdout.write(u.urlopen(\"{url}\", timeout=2).read().decode())'; "
             f"else bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && "
             f"printf \"GET /metrics HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n\" >&3 && timeout 2 cat <&3'; fi")
    pick = f"^({re.escape(metrics.running)}|{re.escape(metrics.tokens)})[{{ ]"
    # r: 1 when any running series is not zero; s: the counters' values, joined
    parse = (f"{{ r=0 s=; while read -r l; do v=${{l##* }}; case $l in {metrics.running}*) "
             "case $v in 0|0.0) ;; *) r=1;; esac;; *) s=$s$v,;; esac; done; echo $r $s; }")
    state = f"{state_dir}/rigctl-liveness-{port}"
    return (f"set -- $({{ {fetch}; }} 2>/dev/null | grep -E '{pick}' | {parse}); n=$(date +%s); f={state}; "
            f"if [ \"$1\" = 1 ] && [ -n \"$2\" ] && read -r p t 2>/dev/null <$f && [ \"$p\" = \"1$2\" ]; then "
            f"[ $((n-t)) -lt {stall_s} ] || {{ echo \"requests running, no new token for $((n-t)) s\"; exit 1; }}; "
            "else echo \"$1$2 $n\" >$f.$$ && mv -f $f.$$ $f; fi")
