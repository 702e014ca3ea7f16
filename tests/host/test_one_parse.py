"""Each unit file is parsed once (the issue "one Unit value"): per `rigctl doctor`, per `doctor --fix` (plus
the one re-read of each file it rewrote: the fixed unit is audited again as its readers will read it), per
row of `rigctl status`; and `--fix` edits the parsed lines, with the same bytes as editing the text and
reading it again after every edit did.

Before, `doctor --path DIR --json` over two units with a drop-in each parsed every .container 7 times and
every drop-in 6 times, `--fix` 14-16 and 10-13 times, every status row its unit 3-4 times, and fleet doctor
(a host without rigctl) 5 or more."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.fakes import FakeClock, FakePodman, FakeSystemd

from rigctl.deploy.status import describe, discover
from rigctl.doctor.checkup import doctor
from rigctl.doctor.host_state import DoctorFacts
from rigctl.host import unitfile
from rigctl.host.unitdirs import Root, collect
from rigctl.places import Scope

PIN = "docker.io/vllm/vllm-openai@sha256:" + "0" * 64
# rigctl's: Restart=on-failure (set), --shm-size beside --ipc=host in its drop-in (removed)
FIXED = ("[Unit]\nDescription=fixed\n\n[Container]\nImage={pin}\nContainerName=fixed\n"
         "PublishPort=127.0.0.1:18100:8000\nLabel=rigctl.managed=true\n\n[Service]\nRestart=on-failure\n")
FIXED_DROPIN = "[Container]\n# shared memory\nPodmanArgs=--ipc=host --shm-size=8g\n"
# nothing to fix: read, never rewritten
SOUND = ("[Container]\nImage={pin}\nContainerName=sound\nPublishPort=127.0.0.1:18101:8000\n"
         "Label=rigctl.managed=true\n\n[Service]\nRestart=always\nRestartSec=10\n")
SOUND_DROPIN = "[Container]\nEnvironment=VLLM_LOGGING_LEVEL=INFO\n"


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times each file is parsed: ``rigctl.host.unitfile.parse`` counted wherever it is called
    from (the module itself, and every rigctl module that imported the name)."""
    counts: Counter[str] = Counter()
    original = unitfile.parse

    def counting(path: str, text: str) -> Any:
        counts[path] += 1
        return original(path, text)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("rigctl") and getattr(module, "parse", None) is original:
            monkeypatch.setattr(module, "parse", counting)
    return counts


def units_dir(tmp_path: Path) -> Path:
    units = tmp_path / "units"
    for name, text, dropin in (("fixed", FIXED, FIXED_DROPIN), ("sound", SOUND, SOUND_DROPIN)):
        (units / f"{name}.container.d").mkdir(parents=True)
        (units / f"{name}.container").write_text(text.format(pin=PIN), encoding="utf-8")
        (units / f"{name}.container.d" / "10-more.conf").write_text(dropin, encoding="utf-8")
    return units


def every_file(units: Path) -> set[str]:
    return {str(p) for p in units.rglob("*") if p.is_file() and not p.name.endswith(".bak")}


def test_doctor_parses_each_file_once(tmp_path: Path, parses: Counter[str]) -> None:
    units = units_dir(tmp_path)
    report = doctor([str(units)], facts=DoctorFacts())
    assert {f.id for f in report.findings} == {"restart-not-always", "ipc-host-with-shm-size"}
    assert set(parses) == every_file(units)
    assert max(parses.values()) == 1, parses


def test_doctor_fix_parses_each_file_once_and_what_it_wrote_once_more(tmp_path: Path, parses: Counter[str]) -> None:
    units = units_dir(tmp_path)
    report = doctor([str(units)], fix=True, facts=DoctorFacts())
    assert report.fix_error is None and report.remaining == []
    (applied,) = report.applied
    written = set(applied.files)
    assert written == {str(units / "fixed.container"), str(units / "fixed.container.d" / "10-more.conf")}
    assert "Restart=always" in (units / "fixed.container").read_text(encoding="utf-8")
    assert set(parses) == every_file(units)
    assert {p: n for p, n in parses.items() if p in written} == dict.fromkeys(written, 2), parses
    assert {p: n for p, n in parses.items() if p not in written} == dict.fromkeys(every_file(units) - written, 1)


def test_status_parses_each_file_once_per_row(tmp_path: Path, parses: Counter[str]) -> None:
    units = units_dir(tmp_path)
    tree = {p: Path(p).read_text(encoding="utf-8") for p in every_file(units)}
    roots = [Root(str(units), "quadlet", "user", str(tmp_path))]
    found = {(Scope.USER, Path(u.path).stem + ".service"): u for u in collect(tree, roots)}
    systemd = FakeSystemd(tmp_path, FakeClock())
    rows = [describe(item, systemd=systemd, podman=FakePodman(), probe=_NoProbe(), gpu=_NoGpu())
            for item in discover(Scope.USER, tmp_path / "records", found)]
    assert sorted((r.unit, r.endpoint) for r in rows) == [
        ("fixed.service", "http://127.0.0.1:18100"), ("sound.service", "http://127.0.0.1:18101")]
    assert set(parses) == set(tree)
    assert max(parses.values()) == 1, parses


@pytest.mark.parametrize("fix", [False, True], ids=["doctor", "doctor --fix"])
def test_fleet_doctor_parses_each_shipped_file_once(tmp_path: Path, parses: Counter[str], fix: bool) -> None:
    """A host without rigctl: its files are shipped back (the real script, in a local `sh`) and audited
    here; with --fix the patches are planned from the same parsed files (nothing is written there)."""
    from rigctl.fleet.host_doctor import host_doctor
    from rigctl.fleet.inventory import Host

    units = tmp_path / ".config" / "containers" / "systemd"
    units.parent.mkdir(parents=True)
    units_dir(tmp_path).rename(units)
    result = host_doctor(Host(name="box", ssh="box", rigctl="rigctl-not-installed-here"), _LocalShell(tmp_path),
                         timeout=60, fix=fix)
    assert result.error is None, result.error
    ours = [f["id"] for f in result.findings if str(f["unit"]).startswith(str(units))]
    assert sorted(ours) == ["ipc-host-with-shm-size", "restart-not-always"]
    assert (len(result.data["fix"]["patches"]) == 1) if fix else ("fix" not in result.data)
    assert every_file(units) <= set(parses)  # and the system's own units, shipped too
    assert max(parses.values()) == 1, parses


class _LocalShell:
    """The ssh Transport, running the script in `sh` here (as tests/security/test_remote_snapshot.py does)."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def run(self, host: Any, command: str, *, timeout: float) -> Any:
        from rigctl.util.proc import Completed

        env = {"HOME": str(self.home), "PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(self.home / "run")}
        done = subprocess.run(["sh", "-c", command], capture_output=True, timeout=timeout, env=env, check=False)
        return Completed(("sh",), done.returncode, done.stdout.decode(errors="replace"),
                         done.stderr.decode(errors="replace"))


class _NoProbe:
    def check(self, base_url: str, health_path: str, served_name: str) -> object:
        raise AssertionError("not active: status must not probe")

    def close(self) -> None:
        pass


class _NoGpu:
    def used_by(self, pids: set[int]) -> int | None:
        return None

    def busy(self, gpu_ids: Any) -> bool | None:
        return None


# --- several edits at once: the same bytes as one by one -----------------------------------------------
# (imported where used: the counts above also run, and fail, on the code before the Unit value)

def _edits() -> list[Callable[[str], Any]]:
    from rigctl.doctor.edits import Remove, ReplaceWord, SetKey
    from rigctl.host.unitfile import Entry

    def image(path: str) -> ReplaceWord:
        return ReplaceWord(Entry(path, "Container", "Image", "", 0, 0), "docker.io/x/y:1", "docker.io/x/y:1@" + PIN[-71:])

    return [
        lambda p: SetKey(p, "Service", "Restart", "always"),
        lambda p: SetKey(p, "Service", "RestartSec", "10", after="Restart"),
        lambda p: Remove("Container", "PodmanArgs", "--shm-size"),
        image,
        lambda p: Remove("Service", "TimeoutSec"),
        lambda p: SetKey(p, "Service", "TimeoutStartSec", "900"),
        lambda p: SetKey(p, "Unit", "Description", "edited"),
        lambda p: SetKey(p, "Install", "WantedBy", "default.target"),
    ]


UNIT_TEXTS = {
    "plain": ("u.container", "[Unit]\nDescription=x\n\n[Container]\nImage=docker.io/x/y:1\n"
                             "PodmanArgs=--ipc=host --shm-size=8g\n\n[Service]\nRestart=no\nTimeoutSec=5\n\n"
                             "[Install]\nWantedBy=multi-user.target\n"),
    "continued": ("u.container", "[Container]\nImage=docker.io/x/y:1\nPodmanArgs=--ipc=host \\\n"
                                 "  # a comment inside\n  --shm-size 8g \\\n  --label=a=b\n[Service]\nRestart=no\n"),
    "crlf-and-comments": ("u.container", "; top\r\n[Container]\r\nImage=docker.io/x/y:1\r\n# c\r\n"
                                         "PodmanArgs=--shm-size=1g\r\n[Service]\r\nRestart=no\r\n"),
    "no-final-newline": ("u.container", "[Container]\nImage=docker.io/x/y:1\n[Service]\nTimeoutSec=5"),
    # the last line continues: an added line would join it (read again as a whole)
    "open-at-the-end": ("u.container", "[Container]\nImage=docker.io/x/y:1\n[Service]\nEnvironment=A=1 \\"),
    # systemd: a continuation closed by a blank line, where a key added to the section goes before the blank
    "service-blank-closes": ("u.service", "[Service]\nExecStart=/usr/bin/podman run --shm-size=1g "
                                          "docker.io/x/y:1 \\\n\n[Install]\nWantedBy=multi-user.target\n"),
    "bom-service": ("u.service", "\ufeff[Service]\nTimeoutSec=5\nExecStart=/usr/bin/podman run docker.io/x/y:1\n"),
    "no-sections": ("u.container", "# nothing yet\n"),
    "dropin": ("u.container.d/10-x.conf", "[Service]\nTimeoutSec=5\nRestart=no\n[Container]\n"
                                          "PodmanArgs=--shm-size=1g\n"),
}


@pytest.mark.parametrize("case", UNIT_TEXTS)
def test_several_edits_give_the_bytes_of_one_edit_after_another(case: str) -> None:
    from rigctl.doctor.edits import apply_edit
    from rigctl.host.unit import Unit

    path, text = UNIT_TEXTS[case]
    edits = [make(path) for make in _edits()]
    at_once = Unit.of(path, text).edits()
    for edit in edits:
        apply_edit(edit, at_once)
        # the entries kept in memory are those of the edited text, read again
        again = unitfile.parse(path, at_once.files[path].text)
        assert (at_once.files[path].entries, at_once.files[path].sections) == (again.entries, again.sections)
    one_by_one = text
    for edit in edits:
        step = Unit.of(path, one_by_one).edits()  # the text read again before every edit
        apply_edit(edit, step)
        one_by_one = step.changed().get(path, one_by_one)
    assert at_once.changed() == ({path: one_by_one} if one_by_one != text else {})
    assert one_by_one != text


def test_a_fix_plan_has_the_bytes_of_its_edits_one_by_one(tmp_path: Path) -> None:
    from rigctl.doctor.audit import read_units, unit_findings
    from rigctl.doctor.edits import apply_edit
    from rigctl.doctor.fix import plan_fixes

    units = units_dir(tmp_path)
    tree = {p: Path(p).read_text(encoding="utf-8") for p in every_file(units)}
    (unit,) = [u for u in collect(tree, [Root(str(units), "path", "path", str(units))]) if "fixed" in u.path]
    facts = DoctorFacts()
    (plan,) = plan_fixes([unit], facts)
    (ctx,), _ = read_units([unit], facts)
    edits = [e for _, found in unit_findings(ctx) for e in found]
    assert len(edits) >= 2
    current = unit
    for edit in edits:  # each edit on a unit whose files are read again from the text the last one left
        step = current.edits()
        apply_edit(edit, step)
        current = current.with_texts(step.changed())
    expected = {p: t for p, t in current.texts().items() if t != unit.texts()[p]}
    assert {c.path: c.after for c in plan.changes} == expected


PIECES = ["[Container]", "[Service]", "[Unit]", "[Install]", "", "# c", "; c", "  ", "Image=docker.io/x/y:1",
          "PodmanArgs=--ipc=host --shm-size=8g", "PodmanArgs=--shm-size 1g \\", "  --label=a \\", "  --shm-size=2g",
          "Restart=no", "Restart=on-failure", "TimeoutSec=5", "Environment=A=1 \\", "  B=2", "\\", "Exec=--model m \\",
          "\ufeffRestart=no", "Restart=no\r", "ExecStart=/usr/bin/podman run --shm-size=1g x \\", "    # inner",
          "WantedBy=default.target", "Key = v", "Volume=/a:/b \\"]


def test_edited_lines_read_as_the_edited_text_would() -> None:
    """Over many edit sequences on odd files (seeded, so the same every run): after every edit, the entries,
    headers and open continuations kept in memory are those of parsing the edited text."""
    import random

    from rigctl.doctor.edits import apply_edit
    from rigctl.host.unit import Unit

    rng = random.Random(20260)
    checked, wrong = 0, []
    for _ in range(2000):
        path = rng.choice(["u.container", "u.service", "u.container.d/1.conf"])
        text = "\n".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12))) + rng.choice(["", "\n"])
        unit = Unit.of(path, text)
        if not unit.main.readable:
            continue
        draft = unit.edits()
        for make in rng.sample(_edits(), rng.randint(1, 6)):
            try:
                apply_edit(make(path), draft)
            except unitfile.UnitParseError:
                break
            edited = draft.files[path]
            if edited.broken:
                break
            again = unitfile.parse(path, edited.text)
            checked += 1
            if (edited.entries, edited.sections, edited.cont) != (again.entries, again.sections, again.cont):
                wrong.append((text, make(path)))
    assert checked > 3000  # edits that ran on readable files (about half the files are refused)
    assert wrong == []
