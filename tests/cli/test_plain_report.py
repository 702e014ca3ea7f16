"""The preflight report printed to a pipe or a file is a plain table (``cli.plaintable``) with what rich
prints to a terminal: the title, one row per finding with its id, result, whole message and fix, the GPU
line and the summary. A terminal (or FORCE_COLOR) still gets rich's coloured table; a dumb one (TERM=dumb)
the plain table."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rigctl.cli.plaintable import fit, render

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"
ARGV = ["preflight", "qwen3-8b-vllm", "--inventory", str(FIXTURES / "h200.json")]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"FORCE_COLOR", "NO_COLOR", "COLUMNS"}}
    return {**clean, "XDG_STATE_HOME": str(tmp_path / "state")}


def rigctl(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *argv], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def test_piped_text_holds_every_finding_of_the_json(env: dict[str, str]) -> None:
    text = rigctl(env, *ARGV)
    data = json.loads(rigctl(env, *ARGV, "--json").stdout)
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    assert lines[0] == "preflight qwen3-8b-vllm"
    assert lines[-1] == "not ready: 17 ok, 8 skip, 4 fail"  # the stack checks (#34) skip on this capture
    assert lines[-2] == "GPUs: 0 NVIDIA H200 GPU-eeff755a-2702-f055-5254-9ef42bb3152f"
    assert max(len(line) for line in lines) <= 160
    assert "\x1b" not in text.stdout and "┃" not in text.stdout  # no colour, no box: a plain table
    columns = [(m.start(), m.end()) for m in re.finditer("-+", lines[2])]  # the rule under the headers
    # a fix holds a command longer than a fix column could take beside a readable message: each fix is
    # on lines of its own under its check, and the message column has the room
    assert [lines[1][a:b].strip() for a, b in columns] == ["check", "result", "message"]
    starts = [next(i for i, line in enumerate(lines) if line.startswith(f"{f['id']} ")) for f in data["findings"]]
    assert starts == sorted(starts)  # one row per finding, in the report's order
    for finding, start, end in zip(data["findings"], starts, [*starts[1:], len(lines) - 2], strict=True):
        block = lines[start:end]
        cut = next((i for i, line in enumerate(block) if line.startswith("  fix: ")), len(block))
        row, fixes = block[:cut], block[cut:]
        cells = ["".join(line[a:b] for line in row).replace(" ", "") for a, b in columns]
        cells.append("".join(line.strip() for line in fixes).removeprefix("fix:").replace(" ", ""))
        # every character of each cell, in order (wrapped, never cut: rich would cut a long digest)
        expected = [finding["id"], finding["severity"], finding["message"], finding["fix"] or ""]
        assert cells == [value.replace(" ", "") for value in expected]


ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLOUR_TERM = "xterm-256color"  # the tests say what terminal it is: the TERM they inherit is no one's choice


def on_a_terminal(env: dict[str, str], *argv: str) -> str:
    """What rigctl ARGV shows on a terminal (a pty, of no size: the width is the default one)."""
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "rigctl", *argv], stdout=follower, stderr=subprocess.PIPE,
                              env=env, timeout=60, check=False)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the writer is gone and everything was read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
    assert done.returncode == 1, done.stderr
    return b"".join(chunks).decode().replace("\r\n", "\n")


def header_cells(shown: str) -> list[str]:
    line = next(line for line in ANSI.sub("", shown).splitlines() if line.startswith("┃"))
    return [cell.strip() for cell in line.split("┃")[1:-1]]


def test_a_terminal_gets_richs_table(env: dict[str, str]) -> None:
    shown = on_a_terminal({**env, "TERM": COLOUR_TERM}, *ARGV)
    assert "┃" in shown and "\x1b[" in shown and "gpu-busy" in shown  # rich: box and colour
    assert header_cells(shown)[:3] == ["check", "result", "message"]


def test_force_color_gets_richs_table_in_a_pipe(env: dict[str, str]) -> None:
    done = rigctl({**env, "TERM": COLOUR_TERM, "FORCE_COLOR": "1"}, *ARGV)
    assert "┃" in done.stdout and re.search(r"\x1b\[[0-9;]*m", done.stdout)
    assert header_cells(done.stdout)[:3] == ["check", "result", "message"]


def test_a_dumb_terminal_gets_the_plain_table(env: dict[str, str]) -> None:
    """TERM=dumb (Emacs' shell, a CI log page): rich draws no colour there, and drew its table 80 columns
    wide whatever width it was given, the result column squeezed to nothing. The plain table instead,
    exactly what a pipe gets."""
    dumb = {**env, "TERM": "dumb"}
    shown = on_a_terminal(dumb, *ARGV)
    assert "\x1b" not in shown and "┃" not in shown
    assert shown == rigctl(dumb, *ARGV).stdout


def test_force_color_colours_a_dumb_terminal_at_the_full_width(env: dict[str, str]) -> None:
    """FORCE_COLOR asks for colour: given on a dumb TERM too, it is rich's table, coloured, laid out at the
    width a colour terminal gets, every column there."""
    dumb = rigctl({**env, "TERM": "dumb", "FORCE_COLOR": "1"}, *ARGV).stdout
    colour = rigctl({**env, "TERM": COLOUR_TERM, "FORCE_COLOR": "1"}, *ARGV).stdout
    assert re.search(r"\x1b\[[0-9;]*m", dumb)
    assert ANSI.sub("", dumb) == ANSI.sub("", colour)
    assert header_cells(dumb)[:3] == ["check", "result", "message"]


def test_narrow_columns_stay_whole_and_wide_ones_share_the_rest() -> None:
    assert fit([5, 6, 40, 30], 100) == [5, 6, 40, 30]  # fits: as they are
    widths = fit([22, 6, 300, 120], 150)
    assert widths[:2] == [22, 6] and sum(widths) == 150 and abs(widths[2] - widths[3]) <= 1
    assert fit([10, 90, 20], 60) == [10, 30, 20]  # only the widest one is cut


def test_render_wraps_every_cell_within_the_width() -> None:
    long_word = "ghcr.io/x/y@sha256:" + "f" * 64  # no space to break at: broken inside
    text = render(("check", "message"), [("image", f"{long_word} is not present"), ("port", "")], title="t",
                  width=40)
    lines = text.splitlines()
    assert lines[0] == "t" and lines[1].split() == ["check", "message"]
    assert all(len(line) <= 40 for line in lines)
    assert "".join(line[7:].strip() for line in lines[3:-1]).replace(" ", "") == \
        f"{long_word}isnotpresent"  # every character kept, in order
    assert lines[-1] == "port"
