"""Issue #10, remote output and hosts: what another host answers is hostile input.

A "remote rigctl" here is a small script on a real loopback sshd host (the hosts file's ``rigctl:``
field points at it) that prints exactly the bytes a test chooses and exits with the status it chooses;
it also records the argv it was given, so a test can see how the remote shell split the command line.

Classes: (1) the answer of a remote rigctl is judged in one place: one JSON envelope whose ``ok`` agrees
with the exit status, else ok:false, exit 3 and a reason; (2) it is bounded and decoded without ever
raising; (3) remote doctor findings are checked one by one; (4) every remote command line quotes every
word, and nothing from the hosts file reaches ssh as an option; (5) remote text shown to a person
carries no terminal control sequence.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rigctl.exitcodes import ExitCode
from rigctl.fleet.answer import parse_answer
from rigctl.fleet.inventory import Host
from rigctl.fleet.loader import load_inventory
from rigctl.fleet.ssh import OUTPUT_LIMIT, OpenSsh, capture, output_cut, remote_command
from rigctl.fleet.visible import shown

pytestmark = pytest.mark.timeout(120)
SSHD = pytest.mark.integration  # the tests that need the `box` fixture: a real sshd on 127.0.0.1

FLEET_TESTS = Path(__file__).resolve().parent.parent / "fleet"
BIG = 20 * 1000 * 1000  # 20 MB: more than OUTPUT_LIMIT
# what must never reach a terminal from another host: ESC (CSI, OSC title), C1 CSI, BEL, bidi override
FORBIDDEN = ("\x1b", "\x9b", "\x07", "\u202e", "\x08")


def _load_sshd_hosts() -> ModuleType:
    name = "rigctl_test_sshd_hosts"  # the same module tests/fleet/conftest.py loads
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, FLEET_TESTS / "sshd_hosts.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def envelope(ok: bool, command: str = "status", **extra: Any) -> bytes:
    return json.dumps({"rigctl": "1", "command": command, "ok": ok, **extra}).encode()


# --- (1) the one judge of an answer: cases shared by the unit and the end-to-end tests -----------------


@dataclass(frozen=True)
class Bad:
    id: str
    stdout: bytes
    rc: int
    reason: str  # part of the reason the local result must give


BAD_ANSWERS = [
    Bad("not-json-exit-0", b"all good, trust me\n", 0, "not JSON"),
    Bad("empty-exit-0", b"", 0, "printed nothing"),
    Bad("ok-true-exit-3", envelope(True), 3, "exited 3 but its envelope says ok:true"),
    Bad("ok-true-exit-1", envelope(True), 1, "exited 1 but its envelope says ok:true"),
    Bad("ok-false-exit-0", envelope(False), 0, "exited 0 but its envelope says ok:false"),
    Bad("two-objects", envelope(True) + b"\n" + envelope(True), 0, "more than one JSON value"),
    Bad("json-then-text", envelope(True) + b"\nand more", 0, "more than one JSON value"),
    Bad("array", b'[{"rigctl": "1", "command": "status", "ok": true}]', 0, "a JSON list, not an object"),
    Bad("string", b'"ok"', 0, "a JSON str, not an object"),
    Bad("envelope-missing", b'{"ok": true, "hosts": []}', 0, "not a rigctl envelope"),
    Bad("envelope-version", b'{"rigctl": 2, "command": "status", "ok": true}', 0, "not a rigctl envelope"),
    Bad("other-command", envelope(True, command="doctor"), 0, "envelope is for command 'doctor'"),
    Bad("command-not-a-string", b'{"rigctl": "1", "command": ["status"], "ok": true}', 0, "envelope is for"),
    Bad("ok-a-string", b'{"rigctl": "1", "command": "status", "ok": "true"}', 0, "not true or false"),
    Bad("ok-missing", b'{"rigctl": "1", "command": "status"}', 0, "not true or false"),
    Bad("unknown-exit", envelope(False), 42, "exited 42, which is not a rigctl exit code"),
    Bad("nan", b'{"rigctl": "1", "command": "status", "ok": true, "x": NaN}', 0, "not JSON"),
    Bad("deep-nesting", b"[" * 200_000 + b"]" * 200_000, 0, "not JSON"),
    Bad("huge-number", b'{"rigctl": "1", "command": "status", "ok": true, "n": 1' + b"0" * 6000 + b"}", 0,
        "not JSON"),
    Bad("invalid-utf8-around", b"\xff\xfe" + envelope(True) + b"\xc3", 0, "not JSON"),
    Bad("nul-bytes", b"\x00" + envelope(True), 0, "not JSON"),
]


@pytest.mark.parametrize("bad", BAD_ANSWERS, ids=lambda b: b.id)
def test_parse_answer_names_what_is_wrong(bad: Bad) -> None:
    document, problem = parse_answer(bad.stdout.decode("utf-8", errors="replace"), bad.rc, command="status")
    assert problem is not None
    assert bad.reason in problem
    if document is not None:  # a document comes back only for inspection, never as an accepted answer
        assert isinstance(document, dict)


@pytest.mark.parametrize(("stdout", "rc"), [
    (envelope(True), 0), (envelope(False), 1), (envelope(False), 3), (envelope(False), 4),
    (envelope(True, command="fleet status"), 0),  # `--host X fleet status` answers "fleet status"
    (b"\n  " + envelope(True, note="caf\xc3\xa9 \xff") + b"\n\n", 0),  # whitespace around; bad bytes inside
])
def test_parse_answer_accepts_an_agreeing_envelope(stdout: bytes, rc: int) -> None:
    command = json.loads(stdout.decode("utf-8", errors="replace"))["command"].split()[0]
    document, problem = parse_answer(stdout.decode("utf-8", errors="replace"), rc, command=command)
    assert problem is None
    assert document is not None
    assert document["ok"] is (rc == 0)


def test_parse_answer_reports_a_cut_output_first() -> None:
    document, problem = parse_answer(envelope(True).decode(), 0, command="status", cut="went past 16 MiB")
    assert document is None
    assert problem == "went past 16 MiB"


# --- (2) bounded, decoded capture (a local command: no sshd needed) ------------------------------------


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_capture_cuts_20_mb_and_says_so(stream: str) -> None:
    start = time.monotonic()
    done = capture(_py(f"import sys\nfor _ in range(400): sys.{stream}.buffer.write(b'x' * 50000)\n"
                       f"sys.{stream}.flush()"), timeout=60)
    assert time.monotonic() - start < 30
    out = done.stdout if stream == "stdout" else done.stderr
    assert len(out) == OUTPUT_LIMIT
    cut = output_cut(done)
    assert cut is not None
    assert "16.0 MiB" in cut


def test_capture_stops_an_endless_writer() -> None:
    done = capture(_py("import sys\nwhile True: sys.stdout.buffer.write(b'y' * 65536)"), timeout=60)
    assert output_cut(done) is not None
    assert done.rc != 0  # it was killed


@pytest.mark.parametrize("data", [b"\xff\xfe\xfd", b"ok \xc3\x28 \xed\xa0\x80 end", b"\xe2\x82", b"\x00\x1b[2J\x9b"])
def test_capture_never_raises_on_bytes_that_are_not_utf8(data: bytes) -> None:
    code = f"import sys; sys.stdout.buffer.write({data!r}); sys.stderr.buffer.write({data!r})"
    done = capture(_py(code), timeout=30)
    assert done.rc == 0
    assert done.stdout == data.decode("utf-8", errors="replace")
    assert done.stderr == done.stdout
    assert output_cut(done) is None


def test_capture_times_out_and_reports_124() -> None:
    start = time.monotonic()
    done = capture(_py("import time; print('started', flush=True); time.sleep(30)"), timeout=1)
    assert time.monotonic() - start < 10
    assert done.rc == 124
    assert "timed out" in done.stderr
    assert done.stdout == "started\n"


# --- (5) the sanitizer ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "visible"), [
    ("\x1b[31mFAIL\x1b[0m", "\\x1b[31mFAIL\\x1b[0m"),
    ("\x1b]0;owned\x07title", "\\x1b]0;owned\\x07title"),
    ("\x9b2J", "\\x9b2J"),
    ("ok\rFAIL", "ok\\x0dFAIL"),
    ("two\nlines\tand\ttabs\x1b[0m\n", "two\nlines\tand\ttabs\\x1b[0m\n"),
    ("mark\u200fRLM \u2066isolate", "mark\\u200fRLM \\u2066isolate"),
    ("abc\u202eevil", "abc\\u202eevil"),
    ("del\x7f nul\x00 bs\x08", "del\\x7f nul\\x00 bs\\x08"),
])
def test_shown_makes_control_characters_visible(raw: str, visible: str) -> None:
    assert shown(raw) == visible
    assert not any(c in shown(raw) for c in FORBIDDEN)


def test_shown_keeps_ordinary_text() -> None:
    text = "line one\n\tindented café ✓ 日本\r\nlast"
    assert shown(text) == text.replace("\r\n", "\n")


# --- (4) remote command lines and ssh arguments (no sshd needed) ------------------------------------------


@pytest.mark.parametrize("word", [
    "rig ctl", "a;touch pwned", "$(touch pwned)", "`touch pwned`", "a|touch pwned", "a&&touch pwned", "*",
    "it's", '"dq"', "a\nb", "-c", "",
])
def test_remote_command_keeps_every_word_one_word(word: str) -> None:
    line = remote_command([word, "preflight", word])
    done = subprocess.run(["sh", "-c", f"printf '%s\\0' {line}"], capture_output=True, check=True, timeout=10)
    assert done.stdout.split(b"\0")[:-1] == [word.encode(), b"preflight", word.encode()]


def test_ssh_argv_puts_the_destination_after_double_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(name="h", ssh="user@box", user="ops", port=2222, identity_file="-oProxyCommand=touch pwned")
    ssh = OpenSsh(tmp_path, allow_options=True)  # the key file's trust is not what this is about
    argv = ssh.argv(host, "true")
    assert argv[-3:] == ["--", "user@box", "true"]
    assert argv[argv.index("-i") + 1] == "-oProxyCommand=touch pwned"  # an option's value, never an option
    seen: list[list[str]] = []
    monkeypatch.setattr("rigctl.fleet.ssh.run", lambda argv, **_: seen.append(list(argv)))
    ssh.close(host)
    assert seen[0][-4:] == ["-O", "exit", "--", "user@box"]


# --- the loopback fleet -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real sshd host on 127.0.0.1 (tests/fleet/sshd_hosts.py)."""
    with _load_sshd_hosts().fleet_or_skip(tmp_path_factory.mktemp("rfleet"), 1) as fleet:
        yield fleet


@pytest.fixture
def control_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    run_dir = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))  # short: a control socket path is <108 bytes
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run_dir))
    yield run_dir
    OpenSsh(run_dir / "rigctl" / "ssh").close_all()
    shutil.rmtree(run_dir, ignore_errors=True)


def hosts_file(fleet: Any, where: Path, program_field: str, **fields: Any) -> Path:
    """A hosts file for box00: ``rigctl: PROGRAM_FIELD`` in its defaults (any string: JSON is YAML),
    ``fields`` for the host."""
    host = {"ssh": "127.0.0.1", "port": fleet.hosts[0].port, **fields}
    lines = ["defaults:", f"  identity_file: {json.dumps(str(fleet.client_key))}",
             f"  rigctl: {json.dumps(program_field)}", "hosts:", "  - name: box00"]
    lines += [f"    {k}: {json.dumps(v)}" for k, v in host.items()]
    path = where / "hosts.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Program:
    """A fake remote rigctl: prints ``stdout``/``stderr`` as bytes, exits ``rc``, records its argv."""

    path: Path
    args_file: Path

    def args(self) -> list[str]:
        return [a.decode() for a in self.args_file.read_bytes().split(b"\0")[:-1]]


def program(where: Path, stdout: bytes, rc: int = 0, stderr: bytes = b"", name: str = "rigctl") -> Program:
    where.mkdir(parents=True, exist_ok=True)
    (where / "out").write_bytes(stdout)
    (where / "err").write_bytes(stderr)
    args = where / "args"
    script = where / name
    q = {k: "'" + str(v).replace("'", "'\\''") + "'" for k, v in
         {"out": where / "out", "err": where / "err", "args": args}.items()}
    script.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" > {q['args']}\ncat {q['out']}\ncat {q['err']} >&2\n"
                      f"exit {rc}\n")
    script.chmod(0o755)
    return Program(script, args)


def rigctl(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, timeout=timeout, check=False)


def one_json(done: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    """The local rigctl printed exactly one JSON object and no traceback."""
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    assert done.returncode != ExitCode.INTERNAL
    doc = json.loads(done.stdout)
    assert isinstance(doc, dict)
    return doc


# --- (1)+(2) `rigctl --host X <command> --json` -----------------------------------------------------------


E2E = [b for b in BAD_ANSWERS if b.id not in {"ok-true-exit-1", "string", "command-not-a-string", "ok-missing"}]


@SSHD
@pytest.mark.parametrize("bad", E2E, ids=lambda b: b.id)
def test_host_json_refuses_an_answer_it_cannot_understand(
    box: Any, control_dir: Path, tmp_path: Path, bad: Bad
) -> None:
    prog = program(tmp_path / "p", bad.stdout, bad.rc, stderr=b"remote \x1b[2J says \xff\n")
    done = rigctl("--hosts", str(hosts_file(box, tmp_path, str(prog.path))), "--host", "box00", "status", "--json")
    doc = one_json(done)
    assert done.returncode == ExitCode.INVALID_INPUT
    assert doc["ok"] is False
    assert doc["command"] == "status"
    assert doc["error"]["code"] == "remote-answer"
    assert bad.reason in doc["error"]["message"]
    assert "box00" in doc["error"]["message"]
    assert "\\x1b[2J" in doc["error"]["message"]  # the remote stderr's end, made visible
    assert b"\x1b" not in done.stdout


@SSHD
@pytest.mark.parametrize(("stdout", "rc"), [
    (envelope(True, recipes=[{"name": "caf\xe9 \x1b[31mred"}]), 0),
    (envelope(False, findings=[]), 1),
    (envelope(False, error={"code": "recipe-not-found", "message": "nope"}), 3),
    (envelope(True, note="bytes") .replace(b"bytes", b"\xff\xfe"), 0),  # bad bytes inside a JSON string
])
def test_host_json_passes_an_agreeing_answer_through(
    box: Any, control_dir: Path, tmp_path: Path, stdout: bytes, rc: int
) -> None:
    prog = program(tmp_path / "p", stdout, rc)
    done = rigctl("--hosts", str(hosts_file(box, tmp_path, str(prog.path))), "--host", "box00", "status", "--json")
    doc = one_json(done)
    assert done.returncode == rc
    assert doc["ok"] is (rc == 0)
    assert doc["host"] == "box00"
    assert b"\x1b" not in done.stdout  # JSON escapes it
    if b"\xff" in stdout:
        assert doc["note"] == "\ufffd\ufffd"
    assert prog.args() == ["status", "--json"]


@SSHD
@pytest.mark.parametrize("where", ["stdout", "stderr"])
def test_host_json_cuts_20_mb_and_says_so(box: Any, control_dir: Path, tmp_path: Path, where: str) -> None:
    big = b"{" + b" " * BIG
    prog = program(tmp_path / "p", big if where == "stdout" else envelope(True),
                   stderr=big if where == "stderr" else b"")
    start = time.monotonic()
    done = rigctl("--hosts", str(hosts_file(box, tmp_path, str(prog.path))), "--host", "box00", "status", "--json")
    assert time.monotonic() - start < 60
    doc = one_json(done)
    assert done.returncode == ExitCode.INVALID_INPUT
    assert "went past 16.0 MiB" in doc["error"]["message"]
    assert len(done.stdout) < 100_000


# --- (5) `rigctl --host X <command>` in text mode ---------------------------------------------------------


HOSTILE_TEXT = (b"\x1b]0;pwned title\x07\x1b[2J\x1b[31mFAIL\x1b[0m \xc2\x9b6n ok\rspoof \xe2\x80\xaeevil\n"
                b"bad bytes \xff\xc3\x28 end\n")


@SSHD
@pytest.mark.parametrize("rc", [0, 1, 4])
def test_host_text_shows_remote_output_without_control_sequences(
    box: Any, control_dir: Path, tmp_path: Path, rc: int
) -> None:
    prog = program(tmp_path / "p", HOSTILE_TEXT, rc, stderr=b"warn \x1b[5m\x1bP+q\x1b\\ \xc2\x9b2J\n")
    done = rigctl("--hosts", str(hosts_file(box, tmp_path, str(prog.path))), "--host", "box00", "status")
    assert done.returncode == rc
    out, err = done.stdout.decode(), done.stderr.decode()  # both are valid UTF-8 now
    for text in (out, err):
        assert not any(c in text for c in FORBIDDEN), text
    assert "\\x1b[31mFAIL\\x1b[0m" in out
    assert "\\x9b6n" in out
    assert "\ufffd" in out
    assert "\\x1b[5m" in err
    assert "\\x9b2J" in err
    assert prog.args() == ["status"]


@SSHD
def test_host_text_refuses_an_exit_status_rigctl_never_uses(box: Any, control_dir: Path, tmp_path: Path) -> None:
    prog = program(tmp_path / "p", b"fine\n", 42)
    done = rigctl("--hosts", str(hosts_file(box, tmp_path, str(prog.path))), "--host", "box00", "status")
    assert done.returncode == ExitCode.INVALID_INPUT
    assert b"exited 42, which is not a rigctl exit code" in done.stderr
    assert b"Traceback" not in done.stderr


# --- (3) fleet doctor: remote findings are checked one by one ---------------------------------------------


GOOD_FINDING = {"unit": "/etc/containers/systemd/a.container", "id": "restart-not-always", "severity": "fail",
                "message": "Restart= is on-failure", "fix": "Restart=always", "where": None, "line": 3,
                "managed": False, "autofix": True}
MALFORMED = [  # (finding, the field its problem names)
    ({k: v for k, v in GOOD_FINDING.items() if k != "unit"}, "unit"),
    ({**GOOD_FINDING, "unit": 12}, "unit"),
    ({**GOOD_FINDING, "severity": "catastrophic"}, "severity"),
    ({**GOOD_FINDING, "severity": "error"}, "severity"),  # a severity, but not one doctor speaks
    ({**GOOD_FINDING, "message": ["a", "list"]}, "message"),
    ({**GOOD_FINDING, "line": "3"}, "line"),
    ({**GOOD_FINDING, "line": 0}, "line"),
    ({**GOOD_FINDING, "managed": "yes"}, "managed"),
    ({k: v for k, v in GOOD_FINDING.items() if k != "id"}, "id"),
    ("just a string", "findings.10"),  # its index in [GOOD_FINDING, *MALFORMED]
    (None, "findings.11"),
]


def _doctor_doc(findings: list[Any], ok: bool = False, **replace: Any) -> bytes:
    body = {"findings": findings, "units": [GOOD_FINDING["unit"]], "driver_version": None, "counts": {"fail": 1}}
    return envelope(ok, command="doctor", **{**body, **replace})


@SSHD
def test_fleet_doctor_reports_each_malformed_finding_as_a_failing_finding(
    box: Any, control_dir: Path, tmp_path: Path
) -> None:
    findings = [GOOD_FINDING, *(f for f, _ in MALFORMED)]
    prog = program(tmp_path / "p", _doctor_doc(findings), 1)
    inventory = str(hosts_file(box, tmp_path, str(prog.path)))
    done = rigctl("fleet", "doctor", "--hosts", inventory, "--json")
    doc = one_json(done)
    assert done.returncode == ExitCode.CHECKS_FAILED
    (host,) = doc["hosts"]
    assert host["via"] == "rigctl"
    assert host["ok"] is False
    got = host["findings"]
    assert len(got) == 1 + len(MALFORMED)
    assert got[0] == GOOD_FINDING
    for i, (finding, field) in enumerate(MALFORMED, start=1):
        assert got[i]["id"] == "remote-malformed-answer", finding
        assert got[i]["severity"] == "fail"
        assert got[i]["message"].startswith(f"remote answered a malformed finding (#{i + 1}): ")
        assert field in got[i]["message"]
    assert prog.args() == ["doctor", "--json"]

    text = rigctl("fleet", "doctor", "--hosts", inventory)
    assert text.returncode == ExitCode.CHECKS_FAILED
    assert b"Traceback" not in text.stderr
    assert text.stdout.count(b"remote-malformed-answer") == len(MALFORMED)


@SSHD
@pytest.mark.parametrize(("document", "rc", "expect"), [
    (_doctor_doc([], units=7), 1, "malformed doctor report"),
    (_doctor_doc([], error="boom"), 1, "malformed doctor report"),
    (envelope(False, command="doctor", findings={"a": 1}), 1, "malformed doctor report"),
    (_doctor_doc([], counts={"fail": "one"}), 1, "malformed doctor report"),
])
def test_fleet_doctor_reports_a_malformed_report(
    box: Any, control_dir: Path, tmp_path: Path, *, document: bytes, rc: int, expect: str
) -> None:
    prog = program(tmp_path / "p", document, rc)
    done = rigctl("fleet", "doctor", "--hosts", str(hosts_file(box, tmp_path, str(prog.path))), "--json")
    doc = one_json(done)
    assert done.returncode == ExitCode.CHECKS_FAILED
    (host,) = doc["hosts"]
    assert host["ok"] is False
    assert [f["id"] for f in host["findings"]] == ["remote-malformed-answer"]
    assert expect in host["findings"][0]["message"]


@SSHD
@pytest.mark.parametrize(("stdout", "rc", "expect"), [
    (b"doctor? never heard of it\n", 0, "not JSON"),
    (_doctor_doc([], ok=True), 3, "exited 3 but its envelope says ok:true"),
    (_doctor_doc([GOOD_FINDING]), 0, "exited 0 but its envelope says ok:false"),
    (_doctor_doc([]) + _doctor_doc([]), 1, "more than one JSON value"),
    (envelope(False, command="status"), 1, "envelope is for command 'status'"),
    (b"{" + b" " * BIG, 0, "went past 16.0 MiB"),
    (b"\xff\xfe\x1b[2J" + _doctor_doc([]), 1, "not JSON"),
])
def test_fleet_doctor_refuses_an_answer_it_cannot_understand(
    box: Any, control_dir: Path, tmp_path: Path, *, stdout: bytes, rc: int, expect: str
) -> None:
    prog = program(tmp_path / "p", stdout, rc, stderr=b"\x1b[31mred\n")
    inventory = str(hosts_file(box, tmp_path, str(prog.path)))
    done = rigctl("fleet", "doctor", "--hosts", inventory, "--json")
    doc = one_json(done)
    assert done.returncode == ExitCode.CHECKS_FAILED
    (host,) = doc["hosts"]
    assert host["ok"] is False
    assert expect in host["error"]
    text = rigctl("fleet", "doctor", "--hosts", inventory)
    assert text.returncode == ExitCode.CHECKS_FAILED
    assert b"Traceback" not in text.stderr
    assert not any(c.encode() in text.stdout for c in FORBIDDEN)


@SSHD
def test_fleet_doctor_text_view_strips_control_sequences_from_findings(
    box: Any, control_dir: Path, tmp_path: Path
) -> None:
    hostile = {**GOOD_FINDING, "unit": "/u/\x1b]0;title\x07a.container", "message": "\x1b[2J\x9b2Jcleared",
               "fix": "\u202erevert", "where": "\x1b[1mw"}
    prog = program(tmp_path / "p", _doctor_doc([hostile]), 1)
    done = rigctl("fleet", "doctor", "--hosts", str(hosts_file(box, tmp_path, str(prog.path))))
    assert done.returncode == ExitCode.CHECKS_FAILED
    out = done.stdout.decode()
    assert not any(c in out for c in FORBIDDEN), out
    assert "\\x1b[2J\\x9b2Jcleared" in out
    assert "\\u202erevert" in out


# --- fleet preflight / swap: the same judge --------------------------------------------------------------


@SSHD
@pytest.mark.parametrize(("command", "extra"), [("preflight", ["r1"]), ("swap", ["r1", "r2"])])
@pytest.mark.parametrize(("stdout", "rc", "expect"), [
    (b"not json\x1b[2J", 0, "not JSON"),
    (b'{"rigctl": "1", "command": "@", "ok": true}', 3, "exited 3 but its envelope says ok:true"),
    (b'{"rigctl": "1", "command": "@", "ok": false}', 0, "exited 0 but its envelope says ok:false"),
])
def test_fleet_remote_commands_refuse_an_answer_they_cannot_understand(
    box: Any, control_dir: Path, tmp_path: Path, *, command: str, extra: list[str], stdout: bytes, rc: int, expect: str
) -> None:
    prog = program(tmp_path / "p", stdout.replace(b"@", command.encode()), rc)
    inventory = str(hosts_file(box, tmp_path, str(prog.path)))
    done = rigctl("fleet", command, *extra, "--hosts", inventory, "--json")
    doc = one_json(done)
    assert done.returncode == ExitCode.CHECKS_FAILED
    (host,) = doc["hosts"]
    assert host["ok"] is False
    assert expect in host["error"]
    assert prog.args() == [command, "--json", "--", *extra]
    text = rigctl("fleet", command, *extra, "--hosts", inventory)
    assert text.returncode == ExitCode.CHECKS_FAILED
    assert not any(c.encode() in text.stdout for c in FORBIDDEN)


# --- (4) the `rigctl:` field and every argument are one word on the remote shell --------------------------


PROGRAM_NAMES = ["rig ctl", "rig;touch pwned", "rig;touch pwned #", "$(touch pwned)", "`touch pwned`", "a|touch pwned",
                 "a&&touch pwned", "a'b\"c", "* >pwned"]


def _pwned(fleet: Any, tmp_path: Path) -> list[Path]:
    """Where a marker would land if a remote shell read a word as syntax: its cwd is the login's home
    from passwd (sshd changes there), $HOME is the test host's."""
    places = [Path(pwd.getpwuid(os.getuid()).pw_dir), fleet.hosts[0].home, tmp_path, Path.cwd(), *tmp_path.iterdir()]
    return [p / "pwned" for p in places if (p / "pwned").exists()]


@SSHD
@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_the_rigctl_field_runs_as_one_word_everywhere(box: Any, control_dir: Path, tmp_path: Path, name: str) -> None:
    ok_status = envelope(True)
    prog = program(tmp_path / "p", ok_status, name=name)
    inventory = str(hosts_file(box, tmp_path, str(prog.path)))
    runs: list[tuple[list[str], list[str]]] = [
        (["--hosts", inventory, "--host", "box00", "status", "--json"], ["status", "--json"]),
        (["--hosts", inventory, "--host", "box00", "status"], ["status"]),
        (["fleet", "doctor", "--hosts", inventory, "--json"], ["doctor", "--json"]),
        (["fleet", "preflight", "r1", "--hosts", inventory, "--json"], ["preflight", "--json", "--", "r1"]),
        (["fleet", "swap", "r1", "r2", "--hosts", inventory, "--json"], ["swap", "--json", "--", "r1", "r2"]),
    ]
    for args, expected in runs:
        prog.args_file.unlink(missing_ok=True)
        done = rigctl(*args)
        assert b"Traceback" not in done.stderr
        assert prog.args() == expected, (args, done.stdout, done.stderr)  # our program ran, as one word
        assert _pwned(box, tmp_path) == []


@SSHD
@pytest.mark.parametrize("name", ["/nonexistent/rigctl; touch pwned #", "/nonexistent/$(touch pwned)",
                                  "nope`touch pwned`", "x || touch pwned"])
def test_a_missing_program_with_shell_syntax_is_only_missing(
    box: Any, control_dir: Path, tmp_path: Path, name: str
) -> None:
    inventory = str(hosts_file(box, tmp_path, name))
    done = rigctl("--hosts", inventory, "--host", "box00", "status", "--json")
    doc = one_json(done)
    assert done.returncode == ExitCode.HOST_UNREACHABLE  # #15: no rigctl there to ask: its own exit code
    assert "not installed" in doc["error"]["message"]
    text = rigctl("--hosts", inventory, "--host", "box00", "status")
    assert text.returncode == ExitCode.HOST_UNREACHABLE
    preflight = one_json(rigctl("fleet", "preflight", "r1", "--hosts", inventory, "--json"))
    assert preflight["hosts"][0]["ok"] is False
    assert "not installed" in preflight["hosts"][0]["error"]
    doctor = one_json(rigctl("fleet", "doctor", "--hosts", inventory, "--json"))
    assert doctor["hosts"][0]["via"] == "ssh"  # `command -v` did not find it: unit files shipped back instead
    assert _pwned(box, tmp_path) == []


@SSHD
@pytest.mark.parametrize("word", ["$(touch pwned)", "; touch pwned", "`touch pwned`", "--overlay=/etc/shadow",
                                  "-h", "a b", "*"])
def test_recipe_names_and_arguments_reach_the_remote_rigctl_verbatim(
    box: Any, control_dir: Path, tmp_path: Path, word: str
) -> None:
    prog = program(tmp_path / "p", envelope(False, command="preflight"), 1)
    inventory = str(hosts_file(box, tmp_path, str(prog.path)))
    done = rigctl("fleet", "preflight", "--hosts", inventory, "--json", "--", word)
    assert done.returncode == ExitCode.CHECKS_FAILED, done.stderr
    assert prog.args() == ["preflight", "--json", "--", word]  # after "--": never an option there
    prog = program(tmp_path / "q", envelope(False, command="show"), 3)
    done = rigctl("--hosts", str(hosts_file(box, tmp_path, str(prog.path))), "--host", "box00", "show", word,
                  "--json")
    assert done.returncode == ExitCode.INVALID_INPUT
    assert prog.args() == ["show", word, "--json"]
    assert _pwned(box, tmp_path) == []


@SSHD
def test_a_later_hosts_option_belongs_to_the_remote_command(box: Any, control_dir: Path, tmp_path: Path) -> None:
    prog = program(tmp_path / "p", envelope(True, command="fleet status"))
    inventory = str(hosts_file(box, tmp_path, str(prog.path)))
    done = rigctl("--hosts", inventory, "--host", "box00", "fleet", "status", "--hosts", "/remote/hosts.yaml",
                  "--json")
    assert done.returncode == 0, done.stderr
    assert prog.args() == ["fleet", "status", "--hosts", "/remote/hosts.yaml", "--json"]


# --- (4) the hosts file never reaches ssh as an option, nor smuggles control characters -------------------


@SSHD
@pytest.mark.parametrize(("fields", "rigctl_field", "problem"), [
    ({"ssh": "-v"}, "rigctl", "may not start with '-'"),
    ({"ssh": "-oProxyJump"}, "rigctl", "may not start with '-'"),
    ({"ssh": "-Gx"}, "rigctl", "may not start with '-'"),
    ({"ssh": "-oProxyCommand=touch pwned"}, "rigctl", "ssh"),
    ({"ssh": "box;touch pwned"}, "rigctl", "ssh"),
    ({"user": "-oProxyCommand"}, "rigctl", "user"),
    ({}, "rigctl\ntouch pwned", "rigctl"),
    ({}, "rigctl\x00", "rigctl"),
    ({}, "\x1b[2Jrigctl", "rigctl"),
    ({"rigctl": "rig\rctl"}, "rigctl", "rigctl"),
    ({"identity_file": "key\nIdentityFile /etc/x"}, "rigctl", "identity_file"),
])
def test_the_hosts_file_refuses_option_like_and_control_values(
    box: Any, control_dir: Path, tmp_path: Path, *, fields: dict[str, str], rigctl_field: str, problem: str
) -> None:
    inventory = str(hosts_file(box, tmp_path, rigctl_field, **fields))
    for args in (["--hosts", inventory, "--host", "box00", "status", "--json"],
                 ["fleet", "status", "--hosts", inventory, "--json"]):
        done = rigctl(*args)
        doc = one_json(done)
        assert done.returncode == ExitCode.INVALID_INPUT
        assert doc["error"]["code"] == "invalid-input"
        assert problem in doc["error"]["message"]
    with pytest.raises(Exception, match=problem):
        load_inventory(inventory)
    assert _pwned(box, tmp_path) == []


@SSHD
def test_an_identity_file_that_looks_like_an_option_is_only_a_path(
    box: Any, control_dir: Path, tmp_path: Path
) -> None:
    prog = program(tmp_path / "p", envelope(True))
    marker = tmp_path / "pwned"
    inventory = str(hosts_file(box, tmp_path, str(prog.path), identity_file=f"-oProxyCommand=touch {marker}"))
    # the operator's word: whatever the key file's directory (here the current one), it reaches ssh as a path
    done = rigctl("--allow-ssh-options", "--hosts", inventory, "--host", "box00", "status", "--json")
    doc = one_json(done)
    assert doc["ok"] is False  # the key is not there: ssh cannot log in
    assert done.returncode == ExitCode.HOST_UNREACHABLE
    assert not marker.exists()
    assert not prog.args_file.exists()


@SSHD
def test_an_unreachable_host_is_a_clean_failure_in_text_and_json(box: Any, control_dir: Path, tmp_path: Path) -> None:
    inventory = str(hosts_file(box, tmp_path, "rigctl", port=box.down_port))
    done = rigctl("--hosts", inventory, "--host", "box00", "status", "--json")
    doc = one_json(done)
    assert done.returncode == ExitCode.HOST_UNREACHABLE
    assert "unreachable" in doc["error"]["message"]
    text = rigctl("--hosts", inventory, "--host", "box00", "status")
    assert text.returncode == ExitCode.HOST_UNREACHABLE
    assert b"unreachable" in text.stderr
    assert b"Traceback" not in text.stderr

