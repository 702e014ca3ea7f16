"""What each import a command module defers (an import inside a function) would cost if it moved to the
module's top: the time ``python -X importtime`` reports for the modules it loads beyond what the command
module has loaded already (the minimum of N fresh processes), and which of the heavy libraries among them.

The command module is loaded for the command's own --help, for its usage errors, and on every Tab of shell
completion (which registers every command), none of which needs what the command's body imports. A
deferred import earns its place when it brings one of the heavy libraries (``HEAVY``) along; one that
brings none (rigctl's own small modules, the standard library) belongs at the module's top.

    uv run python benchmarks/cli_imports.py [--runs N] [--min-us US] [MODULE...]   (default: every cmd_*.py)
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

CLI = Path(__file__).resolve().parent.parent / "src" / "rigctl" / "cli"
MARK = "@@deferred@@"
HEAVY = ("pydantic", "yaml", "httpx", "jinja2", "rich", "pynvml")


def deferred_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import inside a function of ``path`` (TYPE_CHECKING blocks are at the top)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module and inner.level == 0:
                    # `from package import module` loads the module: measure that
                    subs = [f"{inner.module}.{a.name}" for a in inner.names if _is_module(f"{inner.module}.{a.name}")]
                    found += [(inner.lineno, sub) for sub in subs] or [(inner.lineno, inner.module)]
                elif isinstance(inner, ast.Import):
                    found += [(inner.lineno, alias.name) for alias in inner.names]
    return sorted(set(found))


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def marginal(base: str, module: str) -> tuple[int, list[str]]:
    """Microseconds of import time ``module`` adds in a process that imported ``base`` first, and the
    heavy libraries among what it loads."""
    code = f"import {base}\nimport sys\nsys.stderr.write({MARK!r} + '\\n')\nimport {module}\n"
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                         check=True).stderr
    lines = [line for line in err.split(MARK + "\n", 1)[1].splitlines()
             if line.startswith("import time:") and "self [us]" not in line]
    names = {line.rsplit("|", 1)[1].strip() for line in lines}
    return sum(int(line.split("|")[0].split(":")[1]) for line in lines), [h for h in HEAVY if h in names]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--min-us", type=int, default=0, help="print only imports that cost at least this")
    parser.add_argument("modules", nargs="*", help="cli modules by file name, e.g. cmd_deploy")
    args = parser.parse_args()
    paths = [CLI / f"{m}.py" for m in args.modules] if args.modules else sorted(CLI.glob("cmd_*.py"))
    print(f"{'module (line: deferred import)':<64} {'min us':>9}   heavy libraries it loads "
          f"({args.runs} processes each)")
    for path in paths:
        base = f"rigctl.cli.{path.stem}"
        costs: dict[str, tuple[int, list[str]]] = {}
        for line, module in deferred_imports(path):
            if module not in costs:
                runs = [marginal(base, module) for _ in range(args.runs)]
                costs[module] = (min(us for us, _ in runs), runs[0][1])
            us, heavy = costs[module]
            if us >= args.min_us:
                print(f"{f'{path.stem}:{line}: {module}':<64} {us:>9}   {', '.join(heavy) or '-'}")


if __name__ == "__main__":
    main()
