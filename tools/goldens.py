"""What tools/regen_quadlets.py and tools/regen_kube.py share: compare a directory of rendered files with
what the bundled recipes render to now, rewrite it, and the `--check` command line both offer."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from rigctl.render.units import RenderedFile, write_files

README = "README.md"  # each golden directory says what it is; never rendered, never removed


def differences(directory: Path, expected: dict[str, RenderedFile]) -> list[str]:
    """``missing:``, ``extra:`` and ``stale:`` lines, one per file that is not as ``expected``."""
    present = {p.name for p in directory.iterdir() if p.is_file() and p.name != README} if directory.is_dir() else set()
    problems = [f"missing: {name}" for name in sorted(set(expected) - present)]
    problems += [f"extra: {name}" for name in sorted(present - set(expected))]
    problems += [
        f"stale: {name}" for name in sorted(present & set(expected))
        if (directory / name).read_text(encoding="utf-8") != expected[name].text
    ]
    return problems


def regenerate(directory: Path, expected: dict[str, RenderedFile]) -> list[str]:
    """Write ``expected`` into ``directory`` and remove every other file but the README."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in directory.iterdir():
        if path.is_file() and path.name != README and path.name not in expected:
            path.unlink()
    return [str(p) for p in write_files(list(expected.values()), directory)]


def main(argv: list[str], directory: Path, expected: Callable[[], dict[str, RenderedFile]], command: str) -> int:
    """``--check``: list the differences and exit 1 when there are any; otherwise rewrite ``directory``."""
    if argv[:1] == ["--check"]:
        problems = differences(directory, expected())
        for problem in problems:
            sys.stderr.write(f"{directory.name}/ {problem}\n")
        if problems:
            sys.stderr.write(f"run `{command}` and commit the result\n")
        return 1 if problems else 0
    for path in regenerate(directory, expected()):
        sys.stdout.write(f"wrote {path}\n")
    return 0
