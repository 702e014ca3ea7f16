"""Fixtures for the render tests: the real quadlet generator, systemd-analyze, and a decoder of
systemd's ExecStart= syntax (to check what argv a generated unit really hands to podman)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rigctl.render.units import RenderedUnits, write_files
from rigctl.util.proc import run

QUADLET_CANDIDATES = (
    os.environ.get("RIGCTL_QUADLET", ""),
    "/usr/local/libexec/rigctl/quadlet",  # where .ci/get-quadlet.sh installs it
    "/usr/libexec/podman/quadlet",
    "/usr/lib/podman/quadlet",
)


def find_quadlet() -> str | None:
    for candidate in QUADLET_CANDIDATES:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("quadlet")


@dataclass(frozen=True)
class Generated:
    service_text: str
    service_path: Path
    dryrun_stderr: str

    def exec_start(self) -> str:
        # split on \n only: systemd does, while str.splitlines() would also split on U+0085 or U+2028
        lines = [line for line in self.service_text.split("\n") if line.startswith("ExecStart=")]
        assert len(lines) == 1, self.service_text
        return lines[0].removeprefix("ExecStart=")


Generate = Callable[[RenderedUnits, Path, bool], Generated]


@pytest.fixture
def quadlet(need: Callable[[bool, str], None]) -> str:
    path = find_quadlet()
    need(path is not None, "quadlet binary not found (run .ci/get-quadlet.sh)")
    assert path is not None
    return path


@pytest.fixture
def generate(quadlet: str) -> Generate:
    """Write the rendered units to DIR/in, run the real quadlet on them (dry run, then as a generator
    into DIR/out) and return the generated .service."""

    def _generate(rendered: RenderedUnits, base: Path, user: bool = False) -> Generated:
        unit_dir, out_dir = base / "in", base / "out"
        shutil.rmtree(unit_dir, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)
        write_files(rendered.files, unit_dir)
        out_dir.mkdir(parents=True)
        env = {**os.environ, "QUADLET_UNIT_DIRS": str(unit_dir)}
        flags = ["-user"] if user else []
        dry = run([quadlet, "-no-kmsg-log", *flags, "-dryrun"], env=env, timeout=30)
        assert dry.rc == 0, dry.describe()
        assert "unsupported key" not in dry.stderr and "error" not in dry.stderr.lower(), dry.stderr
        gen = run([quadlet, "-no-kmsg-log", *flags, str(out_dir)], env=env, timeout=30)
        assert gen.rc == 0, gen.describe()
        service = out_dir / rendered.service_name
        assert service.is_file(), f"quadlet generated no {rendered.service_name}: {dry.stdout}{dry.stderr}"
        return Generated(service.read_text(encoding="utf-8"), service, dry.stderr)

    return _generate


# --- systemd's ExecStart= syntax ------------------------------------------------------------------
# Per systemd.service(5) and systemd.unit(5): specifiers (%%) are resolved first, then the line is
# split into words (double/single quotes, C escapes), a lone ";" separates commands, and each word
# then gets environment substitution ($$ is a literal $, ${NAME} or $NAME expand).

SPECIFIERS = {"t": "<RUNTIME>", "N": "<UNIT>", "n": "<UNIT>.service", "S": "<STATE>", "C": "<CACHE>"}
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
                   "\\": "\\", '"': '"', "'": "'", "s": " "}


class ExecSyntaxError(ValueError):
    pass


def _specifiers(line: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(line):
        char = line[i]
        if char != "%":
            out.append(char)
            i += 1
            continue
        if i + 1 >= len(line):
            raise ExecSyntaxError("lone % at the end")
        nxt = line[i + 1]
        if nxt == "%":
            out.append("%")
        elif nxt in SPECIFIERS:
            out.append(SPECIFIERS[nxt])
        else:
            raise ExecSyntaxError(f"specifier %{nxt} would be expanded")
        i += 2
    return "".join(out)


def _cunescape(text: str, i: int) -> tuple[str, int]:
    """text[i] is a backslash; return the decoded character and the index after the escape."""
    if i + 1 >= len(text):
        raise ExecSyntaxError("backslash at the end")
    char = text[i + 1]
    if char in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[char], i + 2
    for prefix, width in (("x", 2), ("u", 4), ("U", 8)):
        if char == prefix:
            digits = text[i + 2 : i + 2 + width]
            if not re.fullmatch(rf"[0-9a-fA-F]{{{width}}}", digits):
                raise ExecSyntaxError(f"bad \\{prefix} escape")
            return chr(int(digits, 16)), i + 2 + width
    if re.fullmatch(r"[0-7]{3}", text[i + 1 : i + 4]):
        return chr(int(text[i + 1 : i + 4], 8)), i + 4
    raise ExecSyntaxError(f"unknown escape \\{char}")


def _variables(word: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(word):
        if word[i] != "$":
            out.append(word[i])
            i += 1
        elif word[i + 1 : i + 2] == "$":
            out.append("$")
            i += 2
        else:
            raise ExecSyntaxError(f"unescaped $ in {word!r} would be substituted")
    return "".join(out)


def decode_exec(line: str) -> list[str]:
    text = _specifiers(line)
    words: list[str] = []
    i, n = 0, len(text)
    space = " \t\n\r"
    while True:
        while i < n and text[i] in space:
            i += 1
        if i >= n:
            break
        chars: list[str] = []
        quoted = False
        while i < n and text[i] not in space:
            char = text[i]
            if char in "\"'":
                quoted = True
                i += 1
                while True:
                    if i >= n:
                        raise ExecSyntaxError("unterminated quote")
                    if text[i] == char:
                        i += 1
                        break
                    if text[i] == "\\":
                        decoded, i = _cunescape(text, i)
                        chars.append(decoded)
                    else:
                        chars.append(text[i])
                        i += 1
            elif char == "\\":
                quoted = True
                decoded, i = _cunescape(text, i)
                chars.append(decoded)
            else:
                chars.append(char)
                i += 1
        raw_word = "".join(chars)
        if raw_word == ";" and not quoted:
            raise ExecSyntaxError("a lone ; separates commands")
        words.append(_variables(raw_word))
    return words


@pytest.fixture
def exec_argv() -> Callable[[str], list[str]]:
    return decode_exec


def analyze_verify(service: Path, *, user: bool, runtime_dir: Path) -> str:
    """systemd-analyze verify on a generated unit; returns its complaints (empty when clean).
    It exits 0 on warnings such as unknown keys, so the output is what matters."""
    flags = ["--user"] if user else []
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir)}
    runtime_dir.mkdir(parents=True, exist_ok=True)
    done = run(["systemd-analyze", *flags, "verify", str(service)], env=env, timeout=60)
    return (done.stdout + done.stderr).strip() + ("" if done.rc == 0 else f"\n(exit {done.rc})")


@pytest.fixture
def verify(need: Callable[[bool, str], None]) -> Callable[[Path, bool, Path], str]:
    need(shutil.which("systemd-analyze") is not None, "systemd-analyze not installed")
    # The generated ExecStart runs /usr/bin/podman; verify rejects units whose executables are missing.
    need(os.access("/usr/bin/podman", os.X_OK), "podman not installed (apt-get install podman)")

    def _verify(service: Path, user: bool, runtime_dir: Path) -> str:
        return analyze_verify(service, user=user, runtime_dir=runtime_dir)

    return _verify
