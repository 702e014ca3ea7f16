"""What the JSON contract tests (issue #11) share: run rigctl as an operator types it, and compare what it
printed with key sets the tests write out literally.

A script that reads rigctl's JSON breaks when a key it reads goes away and is surprised when the meaning of
a word changes; so each pinned set is the exact one (a key added is a contract change too, to be made on
purpose, with the test), and each word a script branches on (a status, a severity) is checked against the
words it may be. Values that change from run to run (times, paths, messages) are never compared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from typing import Any

SCHEMA_VERSION = "1"  # the "rigctl" key of every document; written here, not imported: the test pins it
ENVELOPE = frozenset({"rigctl", "command", "ok", "version"})  # version: the rigctl that wrote it (#15)

# The error object of a failed command: `problems` only for bad input, `fix` only when there is one.
ERROR_KEYS_INVALID = frozenset({"code", "message", "problems", "fix"})
ERROR_KEYS_USAGE_WITH_FIX = frozenset({"code", "message", "fix"})
ERROR_KEYS_BARE = frozenset({"code", "message"})
ERROR_CODES = frozenset({
    "error", "usage", "invalid-input", "recipe-not-found", "deploy-failed", "command-failed", "interrupted",
    "render-refused", "no-gpu-layout", "engine-request", "remote-answer",
    # #15: one exit code each (5, 6, 6, 75)
    "not-found", "deployment-not-found", "host-unreachable", "remote-rigctl-missing", "lock-held",
})

# Shapes more than one command prints.
FINDING_KEYS = frozenset({"id", "severity", "message", "fix", "figures"})  # preflight, up, up --dry-run
SEVERITIES = frozenset({"ok", "warn", "fail", "skip", "error"})
GPU_CHOICE_KEYS = frozenset({"index", "uuid", "name"})  # the GPUs a layout picked
NOTE_KEYS = frozenset({"kind", "message"})
NOTE_KINDS = frozenset({"adapted", "assumed", "warning", "info"})
CHECK_KEYS = frozenset({"id", "status", "message", "figures", "duration_s"})  # verify, up's checks
CHECK_STATUSES = frozenset({"pass", "warn", "fail", "skip", "error"})
SIGNATURE_KEYS = frozenset({"id", "line_number", "line", "meaning", "remedy", "link"})
UNIT_FINDING_KEYS = frozenset({"unit", "id", "severity", "message", "fix", "where", "line", "managed", "autofix"})
UNIT_SEVERITIES = frozenset({"fail", "warn", "info"})
DOCTOR_COUNTS_KEYS = frozenset({"fail", "warn", "info"})
FIX_KEYS = frozenset({"applied", "patches", "error", "restart", "remaining"})
# service ... problem (#25): what the unit's manager holds after the fix, read back after its reload
APPLIED_KEYS = frozenset({"unit", "files", "backups", "fixed", "patch", "service", "scope", "reloaded", "expected",
                          "live", "in_effect", "needs_restart", "restarted", "next_steps", "problem"})
PATCH_KEYS = frozenset({"unit", "fixed", "patch", "why"})
# scope, scope_hint (#15): the manager checked, and what to type instead when the other one could run it
PREFLIGHT_KEYS = ENVELOPE | {"recipe", "inventory", "findings", "gpus", "layout", "forced", "scope", "scope_hint"}
PREFLIGHT_LAYOUT_KEYS = frozenset({"explicit", "reasons", "problems"})
RECIPES_KEYS = ENVELOPE | {"recipes", "searched"}
RECIPE_ROW_KEYS = frozenset({
    "name", "origin", "path", "overrides", "valid", "problems", "description", "gpus", "context_length",
})

RUN_TIMEOUT_S = 120.0


def rigctl_json(*args: str, env: Mapping[str, str] | None = None,
                timeout: float = RUN_TIMEOUT_S) -> tuple[int, dict[str, Any]]:
    """``python -m rigctl ARGS`` (ARGS carry ``--json``): its exit status and the one JSON object it printed.
    Fails the test when stdout is not exactly one object or a traceback reached stderr."""
    done = subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(env if env is not None else os.environ), check=False)
    assert "Traceback" not in done.stderr, done.stderr
    try:
        doc = json.loads(done.stdout)  # raises on nothing, on text, and on two documents
    except json.JSONDecodeError as exc:
        raise AssertionError(f"rigctl {' '.join(args)} (exit {done.returncode}) printed no single JSON object: "
                             f"{exc}\nstdout: {done.stdout[:2000]!r}\nstderr: {done.stderr[-2000:]}") from exc
    assert isinstance(doc, dict), f"rigctl {' '.join(args)} printed a JSON {type(doc).__name__}, not an object"
    return done.returncode, doc


def check_envelope(doc: Mapping[str, Any], command: str, ok: bool) -> None:
    """The envelope comes first, in this order, with these values."""
    assert list(doc)[:3] == ["rigctl", "command", "ok"], list(doc)
    assert doc["rigctl"] == SCHEMA_VERSION
    assert doc["command"] == command
    assert doc["ok"] is ok, f"ok is {doc['ok']!r}, expected {ok}: {json.dumps(doc)[:3000]}"


def check_keys(obj: Any, expected: Iterable[str], where: str) -> None:
    """``obj`` is an object with exactly the ``expected`` keys."""
    assert isinstance(obj, dict), f"{where}: a JSON {type(obj).__name__}, not an object"
    want, got = set(expected), set(obj)
    assert got == want, f"{where}: keys added {sorted(got - want)}, keys removed {sorted(want - got)}"


def check_items(items: Any, expected: Iterable[str], where: str) -> list[dict[str, Any]]:
    """``items`` is a non-empty list (an empty one would pin nothing) of objects with exactly ``expected``."""
    assert isinstance(items, list), f"{where}: a JSON {type(items).__name__}, not a list"
    assert items, f"{where}: empty, so its items' keys cannot be checked"
    want = set(expected)
    for i, item in enumerate(items):
        check_keys(item, want, f"{where}[{i}]")
    return items


def check_words(values: Iterable[Any], vocabulary: Iterable[str], where: str) -> None:
    """Each value is one of the words scripts may branch on."""
    allowed = set(vocabulary)
    odd = sorted({repr(v) for v in values if v not in allowed})
    assert not odd, f"{where}: {', '.join(odd)} not among {sorted(allowed)}"


def check_error(doc: Mapping[str, Any], command: str, keys: Iterable[str], code: str) -> None:
    """A failed command's one object: the envelope with ok false and nothing but ``error`` besides."""
    check_envelope(doc, command, False)
    check_keys(doc, ENVELOPE | {"error"}, command)
    check_keys(doc["error"], keys, f"{command}.error")
    check_words([doc["error"]["code"]], ERROR_CODES, f"{command}.error.code")
    assert doc["error"]["code"] == code
