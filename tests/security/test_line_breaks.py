"""Unicode and control line breaks (issue #10 item 3) and the linear unit parser (item 5).

quadlet and systemd end a line at "\\n" only, while Python's str.splitlines() also ends one at U+0085,
U+2028, U+2029, VT, FF and FS/GS/RS. A recipe value holding one of them rendered clean, then doctor's
parser (and its --fix) saw extra lines -- a host ExecStartPre=, a hidden Restart=. Now the recipe model
and the escaper refuse every such character in every string, and every parse and edit of a unit splits
at "\\n" only, reading each file the way its real reader (quadlet or systemd) does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.render.conftest import find_quadlet

from rigctl.doctor.audit import audit
from rigctl.doctor.fix import plan_fixes
from rigctl.doctor.host_state import DoctorFacts
from rigctl.exitcodes import ExitCode
from rigctl.host.unit import Unit
from rigctl.host.unitfile import (
    MergedUnit,
    UnitParseError,
    parse,
    remove_option,
    replace_in_entry,
    set_key,
    split_words,
    unit_lines,
)
from rigctl.recipe.catalog import bundled_recipes_dir
from rigctl.recipe.load import load
from rigctl.render import escape
from rigctl.render.escape import RenderError
from rigctl.render.units import render_units
from rigctl.util.proc import run

BASE = bundled_recipes_dir() / "qwen3-8b-vllm.yaml"
DIGEST = "sha256:" + "0" * 64
IMAGE = f"docker.io/library/busybox@{DIGEST}"

# every character that ends a line for str.splitlines() but not for quadlet/systemd, and a C1 control
BREAKS = {
    "NEL": ("\x85", "U+0085 NEXT LINE"),
    "LS": ("\u2028", "U+2028 LINE SEPARATOR"),
    "PS": ("\u2029", "U+2029 PARAGRAPH SEPARATOR"),
    "VT": ("\x0b", "U+000B LINE TABULATION"),
    "FF": ("\x0c", "U+000C FORM FEED"),
    "FS": ("\x1c", "U+001C FILE SEPARATOR"),
    "GS": ("\x1d", "U+001D GROUP SEPARATOR"),
    "RS": ("\x1e", "U+001E RECORD SEPARATOR"),
    "CSI": ("\x9b", "U+009B"),
}


def _base() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(BASE.read_text())
    return data


# (name, dotted path the message must show, how to plant the character)
def _plant_description(d: dict[str, Any], ch: str) -> None:
    d["description"] = f"LAN{ch}[Service]{ch}ExecStartPre=/bin/touch /tmp/x"


def _plant_volume(d: dict[str, Any], ch: str) -> None:
    d["container"]["volumes"].append({"host": f"/srv/x{ch}--privileged --pid=host", "container": "/x"})


def _plant_env_value(d: dict[str, Any], ch: str) -> None:
    d["container"]["env"]["A"] = f"b{ch}Restart=always"


def _plant_env_name(d: dict[str, Any], ch: str) -> None:
    d["engine"]["env"] = {f"A{ch}B": "1"}


def _plant_engine_arg(d: dict[str, Any], ch: str) -> None:
    d["engine"]["args"].append(f"--served{ch}x")


def _plant_image(d: dict[str, Any], ch: str) -> None:
    d["image"] = d["image"].replace("vllm-openai", f"vllm{ch}openai")


def _plant_extra_arg(d: dict[str, Any], ch: str) -> None:
    d["container"]["extra_podman_args"] = [f"--log-opt=x{ch}y"]


def _plant_checksum_name(d: dict[str, Any], ch: str) -> None:
    d["checkpoint"]["sha256"] = {f"model{ch}.safetensors": "a" * 64}


def _plant_gpu_select(d: dict[str, Any], ch: str) -> None:
    d["gpus"]["select"] = [f"0{ch}"]  # a pattern-checked list item still names the character


def _plant_served_name(d: dict[str, Any], ch: str) -> None:
    d["served_name"] = f"qwen{ch}3"


FIELDS: dict[str, tuple[str, Callable[[dict[str, Any], str], None]]] = {
    "description": ("description", _plant_description),
    "volume-host": ("container.volumes.1.host", _plant_volume),
    "env-value": ("container.env.A", _plant_env_value),
    "env-name": ("engine.env", _plant_env_name),
    "engine-arg": ("engine.args.2", _plant_engine_arg),
    "image": ("image", _plant_image),
    "podman-arg": ("container.extra_podman_args.0", _plant_extra_arg),
    "checksum-key": ("checkpoint.sha256", _plant_checksum_name),
    "gpu-select": ("gpus.select.0", _plant_gpu_select),
    "served-name": ("served_name", _plant_served_name),
}


def _rigctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True,
                          timeout=120, check=False, env=os.environ.copy())


# --- the recipe model: `rigctl validate` on real files -----------------------------------------------


@pytest.mark.parametrize("char", BREAKS, ids=list(BREAKS))
def test_validate_refuses_line_breaks_in_every_field(char: str, tmp_path: Path) -> None:
    ch, name = BREAKS[char]
    files = {}
    for field, (_, plant) in FIELDS.items():
        data = _base()
        plant(data, ch)
        path = tmp_path / f"{field}.yaml"
        path.write_text(yaml.safe_dump(data))  # the character travels as a YAML escape, as an attacker's would
        assert yaml.safe_load(path.read_text()) == data
        files[field] = path
    done = _rigctl("validate", *map(str, files.values()), "--json")
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-2000:]
    assert done.returncode == ExitCode.INVALID_INPUT, done.stdout[-2000:] + done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["ok"] is False
    by_file = {Path(f["file"]).stem: f for f in doc["files"]}
    for field, (dotted, _) in FIELDS.items():
        entry = by_file[field]
        assert entry["ok"] is False, (field, entry)
        # `file: dotted.path: problem`, naming the character
        assert any(f"{files[field]}: {dotted}: " in p and name in p for p in entry["problems"]), (field, entry)


def test_validate_text_output_names_the_character_and_exits_3(tmp_path: Path) -> None:
    data = _base()
    _plant_description(data, "\u2028")
    path = tmp_path / "hostile.yaml"
    path.write_text(yaml.safe_dump(data))
    done = _rigctl("validate", str(path))
    assert done.returncode == ExitCode.INVALID_INPUT, done.stdout + done.stderr
    assert f"{path}: description: contains U+2028 LINE SEPARATOR" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize("char", BREAKS, ids=list(BREAKS))
def test_unknown_key_and_union_tag_with_line_break_are_named(char: str) -> None:
    from rigctl.errors import RigctlError
    from rigctl.recipe.load import validate_data

    ch, name = BREAKS[char]
    unknown_key, bad_tag = _base(), _base()
    unknown_key["container"][f"ipc{ch}"] = "host"
    bad_tag["speculative"] = {"method": f"mtp{ch}"}
    for data, where in ((unknown_key, "test: container: key"), (bad_tag, "test: speculative: method:")):
        with pytest.raises(RigctlError) as caught:
            validate_data(data, "test")
        assert caught.value.exit_code == ExitCode.INVALID_INPUT
        assert any(line.startswith(where) and name in line for line in str(caught.value).split("\n")), str(caught.value)


# --- the escaper ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("char", BREAKS, ids=list(BREAKS))
def test_escaper_refuses_line_breaks(char: str) -> None:
    ch, name = BREAKS[char]
    for carry in (escape.word, escape.raw, escape.text):
        with pytest.raises(RenderError, match=re.escape(name)):
            carry(f"a{ch}b", "value")


@pytest.mark.parametrize("char", BREAKS, ids=list(BREAKS))
def test_render_refuses_line_break_in_a_label(char: str) -> None:
    ch, name = BREAKS[char]
    recipe = load("qwen3-8b-vllm").recipe
    for labels in ({"owner": f"me{ch}Restart=no"}, {f"own{ch}er": "me"}):
        with pytest.raises(RenderError, match=re.escape(name)) as caught:
            render_units(recipe, podman_version=(5, 4), labels_extra=labels)
        assert caught.value.exit_code == ExitCode.INVALID_INPUT


# --- parsing: one line is one line ---------------------------------------------------------------------


def _container(service: str = "", unit: str = "", container: str = "") -> str:
    return (f"[Unit]\nDescription=test\n{unit}\n[Container]\nImage={IMAGE}\n{container}\n"
            f"[Service]\n{service}\n[Install]\nWantedBy=default.target\n")


@pytest.mark.parametrize("path", ["x.container", "x.service", "x.container.d/10.conf", "x.service.d/10.conf"])
@pytest.mark.parametrize("char", BREAKS, ids=list(BREAKS))
def test_characters_inside_values_stay_inside_one_line(char: str, path: str) -> None:
    ch, _ = BREAKS[char]
    text = (f"[Unit]\nDescription=x{ch}[Service]{ch}ExecStartPre=/bin/touch /tmp/x\n"
            f"[Service]\nEnvironment=A=b{ch}Restart=always\nExecStart=/bin/true\n")
    parsed = parse(path, text)
    assert len(parsed.lines) == 5
    keys = [(e.section, e.key) for e in parsed.entries]
    assert keys == [("Unit", "Description"), ("Service", "Environment"), ("Service", "ExecStart")]
    merged = MergedUnit.of(parsed)
    assert merged.last("Service", "Restart") is None
    assert merged.all("Service", "ExecStartPre") == []
    assert merged.value("Service", "Environment") == f"A=b{ch}Restart=always"
    assert [s for s, _ in parsed.sections] == ["Unit", "Service"]


@pytest.mark.parametrize("char", BREAKS, ids=list(BREAKS))
def test_words_split_on_systemd_whitespace_only(char: str) -> None:
    ch, _ = BREAKS[char]
    assert split_words(f"--volume=/a{ch}--privileged --x") == [f"--volume=/a{ch}--privileged", "--x"]
    assert split_words(" a\tb\r\nc ") == ["a", "b", "c"]
    assert split_words("a\u3000b") == ["a\u3000b"]  # an ideographic space joins, as in systemd


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("[Service]\nRestart=always\rExecStartPre=/bin/touch /tmp/x\n", "carriage return"),
        ("[Service]\nRestart=always\x00ExecStartPre=/bin/touch /tmp/x\n", "NUL"),
        ("[Service]\r\rRestart=no\n", "carriage return"),
    ],
)
@pytest.mark.parametrize("path", ["x.container", "x.service"])
def test_bare_cr_or_nul_is_unreadable_not_guessed(text: str, what: str, path: str) -> None:
    # systemd ends a line at CR and NUL, quadlet does not (and copies them into the .service)
    with pytest.raises(UnitParseError, match=what):
        parse(path, text)


def test_crlf_is_a_line_end_for_both_readers() -> None:
    for path in ("x.container", "x.service"):
        merged = MergedUnit.of(parse(path, "[Service]\r\nRestart=always\r\nEnvironment=A=b\\\r\n C=d\r\n"))
        assert merged.value("Service", "Restart") == "always"
        assert [e.key for e in merged.entries] == ["Restart", "Environment"]


def test_quadlet_and_systemd_dialects_are_read_as_their_readers_do() -> None:
    # quadlet trims Unicode White_Space around a line; systemd only " \t\n\r"
    text = "[Service]\nRestart=always\n\u3000Restart=no\n"
    assert MergedUnit.of(parse("x.container", text)).value("Service", "Restart") == "no"
    assert MergedUnit.of(parse("x.service", text)).value("Service", "Restart") == "always"
    # a blank line inside a continuation: quadlet keeps joining, systemd ends the line
    text = "[Service]\nEnvironment=a\\\n\nRestart=always\n"
    assert MergedUnit.of(parse("x.container", text)).last("Service", "Restart") is None
    assert MergedUnit.of(parse("x.service", text)).value("Service", "Restart") == "always"
    # quadlet drops a continuation that runs into the end of the file; systemd parses it
    text = "[Service]\nRestart=always\\\n# comment\n"
    assert MergedUnit.of(parse("x.container", text)).last("Service", "Restart") is None
    assert MergedUnit.of(parse("x.service", text)).value("Service", "Restart") == "always"
    # quadlet removes the backslash, systemd turns it into a space
    text = "[Container]\nPodmanArgs=--privi\\\nleged\n"
    assert MergedUnit.of(parse("x.container", text)).words("Container", "PodmanArgs") == ["--privileged"]
    assert MergedUnit.of(parse("x.service", text)).words("Container", "PodmanArgs") == ["--privi", "leged"]
    # systemd continues only on an odd run of backslashes
    text = "[Service]\nEnvironment=A=b\\\\\nRestart=always\n"
    assert MergedUnit.of(parse("x.service", text)).value("Service", "Restart") == "always"
    # a drop-in is read by the reader of its unit
    assert MergedUnit.of(parse("container.d/1.conf", "[Service]\n\u3000Restart=no\n")).value("Service", "Restart") == "no"


@pytest.mark.parametrize("path", ["x.container", "x.service"])
def test_large_continuation_parses_to_one_entry(path: str) -> None:
    # quadratic joining took over a minute here; the result must be right for a huge input
    count = 500_000
    text = "[Service]\n" + "Environment=a\\\n" * count + "Restart=always\n"
    merged = MergedUnit.of(parse(path, text))
    (entry,) = merged.entries
    assert entry.key == "Environment" and entry.first == 1 and entry.last == count + 1
    words = split_words(entry.value)
    assert len(words) == (1 if path.endswith(".container") else count + 1)
    assert words[-1].endswith("Restart=always")
    assert merged.last("Service", "Restart") is None


# --- edits keep every line as it was -------------------------------------------------------------------


@pytest.mark.parametrize("char", BREAKS, ids=list(BREAKS))
def test_edits_preserve_hostile_characters_and_add_no_line(char: str) -> None:
    ch, _ = BREAKS[char]
    hostile_unit = f"Description=LAN{ch}[Service]{ch}ExecStartPre=/bin/touch /tmp/x"
    hostile_env = f"Environment=A=b{ch}Restart=always"
    text = _container(service=f"{hostile_env}\nRestart=on-failure",
                      unit=hostile_unit.replace("Description", "Documentation"),
                      container=f"PodmanArgs=--ipc=host --shm-size=8g --label=x{ch}y")
    path = "x.container"
    before = text.split("\n")
    parsed = parse(path, text)

    step = set_key(parsed, "Service", "Restart", "always")
    step = remove_option(step, "Container", ["PodmanArgs"], "--shm-size")
    entry = next(e for e in step.entries if e.key == "Environment")
    edited = replace_in_entry(step, entry, "A=b", "A=c").text

    after = edited.split("\n")
    assert len(after) == len(before)
    assert f"Documentation=LAN{ch}[Service]{ch}ExecStartPre=/bin/touch /tmp/x" in after
    assert f"Environment=A=c{ch}Restart=always" in after
    assert f"PodmanArgs=--ipc=host --label=x{ch}y" in after
    assert "Restart=always" in after and "Restart=on-failure" not in after
    assert len(unit_lines(edited)) == len(parsed.lines)
    merged = MergedUnit.of(parse(path, edited))
    assert merged.all("Service", "ExecStartPre") == [] and merged.value("Service", "Restart") == "always"


@pytest.mark.parametrize("char", BREAKS, ids=list(BREAKS))
def test_doctor_fix_plan_keeps_hostile_values_on_their_line(char: str, tmp_path: Path) -> None:
    ch, _ = BREAKS[char]
    # three autofixes: Restart= rewritten (set_key), --shm-size removed (remove_option), the image
    # pinned (_replace_word); RestartSec= is there already, so no fix needs to add a line
    text = (f"[Unit]\nDocumentation=LAN{ch}[Service]{ch}ExecStartPre=/bin/touch /tmp/x\n"
            f"[Container]\nImage=docker.io/library/busybox:1\nVolume=/srv/x{ch}--privileged --pid=host:/x:ro\n"
            "PodmanArgs=--ipc=host --shm-size=8g\nLabel=rigctl.managed=true\n"
            f"[Service]\nEnvironment=A=b{ch}Restart=always\nRestart=on-failure\nRestartSec=10\n")
    unit = Unit.of(str(tmp_path / "x.container"), text)
    facts = DoctorFacts(image_digests={"docker.io/library/busybox:1": DIGEST})
    found = {f.id for f in audit([unit], facts)}
    # the character inside Environment= hides no Restart=always
    assert {"restart-not-always", "ipc-host-with-shm-size", "image-not-pinned"} <= found
    (plan,) = plan_fixes([unit], facts)
    (change,) = plan.changes
    before, after = change.before.split("\n"), change.after.split("\n")
    assert len(after) == len(before)
    assert sum(a != b for a, b in zip(before, after, strict=True)) == 3  # Image=, PodmanArgs=, Restart=
    for line in before:
        if ch in line:
            assert line in after, line  # byte for byte
    assert all(ch not in line for line in after if line not in before)
    merged = MergedUnit.of(parse(unit.path, change.after))
    assert merged.all("Service", "ExecStartPre") == []
    assert merged.value("Service", "Restart") == "always"
    assert [e.value for e in merged.all("Container", "Volume")] == [f"/srv/x{ch}--privileged --pid=host:/x:ro"]
    # the patch shown for the change splits at "\n" only as well
    diff_lines = change.diff().split("\n")
    assert f" Documentation=LAN{ch}[Service]{ch}ExecStartPre=/bin/touch /tmp/x" in diff_lines


def test_doctor_reports_an_unreadable_unit_and_exits_1(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    (units / "cr.container").write_bytes(
        f"[Container]\nImage={IMAGE}\nContainerName=x\rPodmanArgs=--privileged\n[Service]\nRestart=always\n".encode())
    (units / "nul.service").write_bytes(
        b"[Service]\nExecStart=/usr/bin/podman run x\nRestart=always\x00Restart=no\n")
    done = _rigctl("doctor", "--path", str(units), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    doc = json.loads(done.stdout)  # one JSON object, no traceback
    found = {(Path(f["unit"]).name, f["id"]) for f in doc["findings"]}
    assert {("cr.container", "unit-unreadable"), ("nul.service", "unit-unreadable")} <= found
    done = _rigctl("doctor", "--path", str(units), "--fix", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    assert json.loads(done.stdout)["ok"] is False
    assert (units / "cr.container").read_bytes().count(b"\r") == 1  # nothing rewritten


# --- against the real quadlet generator ---------------------------------------------------------------

HOSTILE_CONTAINERS = {
    **{f"nel-env-{k}": _container(service=f"Environment=A=b{ch}Restart=always") for k, (ch, _) in BREAKS.items()},
    **{f"desc-{k}": _container(unit=f"Documentation=https://x{ch}[Service]{ch}ExecStartPre=/bin/touch /tmp/x")
       for k, (ch, _) in BREAKS.items()},
    "ideographic-space-key": _container(service="Restart=always\n\u3000Restart=no"),
    "nbsp-key": _container(service="Restart=always\n\xa0Restart=no"),
    "blank-in-continuation": _container(service="Environment=a\\\n\nRestart=always"),
    "continuation-to-eof": f"[Container]\nImage={IMAGE}\n[Service]\nRestart=always\\\n# end\n",
    "joined-option": _container(container="PodmanArgs=--cap-add=CHOWN --privi\\\nleged"),
    "vt-key": _container(service="Restart=always\nRestart\x0b=no"),
}


@pytest.mark.integration
def test_doctor_sees_the_keys_quadlet_generates(tmp_path: Path, need: Callable[[bool, str], None]) -> None:
    quadlet = find_quadlet()
    need(quadlet is not None, "quadlet binary not found (run .ci/get-quadlet.sh)")
    assert quadlet is not None
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    for name, text in HOSTILE_CONTAINERS.items():
        (src / f"{name}.container").write_text(text, encoding="utf-8")
    done = run([quadlet, "-no-kmsg-log", str(out)], env={**os.environ, "QUADLET_UNIT_DIRS": str(src)}, timeout=60)
    assert done.rc == 0, done.describe()
    for name, text in HOSTILE_CONTAINERS.items():
        service_path = out / f"{name}.service"
        assert service_path.is_file(), (name, done.stderr)
        ours = MergedUnit.of(parse(f"{name}.container", text))
        generated = MergedUnit.of(parse(str(service_path), service_path.read_text(encoding="utf-8")))
        for section, key in (("Service", "Restart"), ("Service", "ExecStartPre"), ("Unit", "Documentation")):
            assert [e.value for e in ours.all(section, key)] == [e.value for e in generated.all(section, key)], \
                (name, key)
        privileged_ours = "--privileged" in ours.words("Container", "PodmanArgs")
        privileged_real = "--privileged" in split_words(generated.value("Service", "ExecStart") or "")
        assert privileged_ours == privileged_real, name


@pytest.mark.parametrize(
    ("text", "managed"),
    [
        ("[Container]\nLabel=rigctl.managed=true\n", True),
        ("[Container]\nLabel=app=x rigctl.managed=true\n", True),
        ("[Container]\nLabel=rigctl.managed=false\n", False),
        ("[Unit]\nDescription=x\u2028Label=rigctl.managed=true\n", False),
        ("[Unit]\nDescription=x\x85Label=rigctl.managed=true\n", False),
        ("[Container]\nLabel=rigctl.managed=truest\n", False),
    ],
)
def test_status_reads_the_managed_label_by_systemds_line_rule(text: str, managed: bool) -> None:
    # the rule status.discover applies
    assert Unit.of("/etc/containers/systemd/rigctl-x.container", text).managed is managed
