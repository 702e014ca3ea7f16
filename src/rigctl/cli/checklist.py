"""Every check rigctl runs, read from the registries that run them: preflight's ``CHECKS`` (and its deep
check), verify's ``REGISTRY`` and doctor's rule ``REGISTRY``. ``rigctl checks`` lists them and ``rigctl
explain ID`` says more about one, so what they print cannot drift from what runs.

What a check guards is its registry summary (verify's checks have none: their docstring's first sentence).
The fixes it can suggest are read from its own source: the text given as ``fix`` to ``fail``/``warn``
(preflight), ``Hit``/``HostHit`` (doctor), or assigned to a variable named ``fix``, with ``…`` where the
real finding fills in a value from the recipe or host. Reading them there keeps one copy of each fix.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

KINDS = ("preflight", "verify", "doctor")
MAX_FIXES = 6

# The deep check is not in preflight's CHECKS (it runs only with --deep); its words live with its code.
DEEP = {"gpu-allreduce": ("a real NCCL all_reduce over the chosen GPUs finishes, at the speed their link allows "
                          "(opt-in: preflight --deep)", "rigctl.preflight.allreduce", "classify")}


@dataclass(frozen=True)
class CheckInfo:
    id: str
    kind: str  # preflight | verify | doctor
    summary: str  # what it guards, one line
    about: str | None = None  # why: the check's docstring (or, for a deep check, its module's)
    severity: str = "fail"  # what a problem it finds is, at most (a doctor rule's default; a hit may lower it)
    force: bool | None = None  # preflight: whether `--force ID` turns its fail into a warning; None elsewhere
    fixes: list[str] = field(default_factory=list)  # the fixes it can suggest
    source: str = ""  # module.function, for whoever wants to read it

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "summary": self.summary, "about": self.about,
                "severity": self.severity, "force": self.force, "fixes": self.fixes, "source": self.source}


def all_checks() -> list[CheckInfo]:
    """Every check, in each registry's order: preflight, verify, doctor."""
    return [*_preflight(), *_verify(), *_doctor()]


def find(check_id: str) -> list[CheckInfo]:
    """The checks of this id (one, unless two kinds share an id)."""
    return [c for c in all_checks() if c.id == check_id]


def _preflight() -> Iterator[CheckInfo]:
    from rigctl.preflight.runner import CHECKS  # noqa: PLC0415 - the registries load only for these commands

    for check in CHECKS:
        yield CheckInfo(check.id, "preflight", check.summary, _doc(check.fn), "fail", check.forceable,
                        fixes_in(check.fn, {"fail": 1, "warn": 1}), _where(check.fn))
    for check_id, (summary, module_name, function) in DEEP.items():
        module = importlib.import_module(module_name)
        fn = getattr(module, function)
        yield CheckInfo(check_id, "preflight", summary, _doc(module), "fail", True,
                        fixes_in(fn, {"fail": 1, "warn": 1, "Verdict": 2}), _where(fn))


def _verify() -> Iterator[CheckInfo]:
    from rigctl.verify.checks import REGISTRY  # noqa: PLC0415

    for check_id, check in REGISTRY.items():
        # a check judged after the run (repetition) says what it guards in its judge's docstring
        about = " ".join(d for d in (_doc(check.judge) if check.judge else None, _doc(check.run)) if d) or None
        summary = (about or check_id).split(". ")[0].split("; ")[0].rstrip(".")
        yield CheckInfo(check_id, "verify", summary, about, "fail", None, [], _where(check.run))


def _doctor() -> Iterator[CheckInfo]:
    from rigctl.doctor.rules import REGISTRY  # noqa: PLC0415

    for rule in REGISTRY:
        about = _doc(rule.check) or _doc(sys.modules[rule.check.__module__])
        yield CheckInfo(rule.id, "doctor", rule.summary, about, str(rule.severity), None,
                        fixes_in(rule.check, {"Hit": 1, "HostHit": 2}), _where(rule.check))


def _doc(obj: object) -> str | None:
    text = inspect.getdoc(obj)
    return " ".join(text.split()) if text else None


def _where(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


# --- the fixes in a check's source ---------------------------------------------------------------------


def fixes_in(fn: Callable[..., Any], calls: dict[str, int]) -> list[str]:
    """The fix texts ``fn`` can give: the argument at position ``calls[name]`` (or ``fix=``) of each call
    to ``name``, and every string assigned to ``fix``; ``…`` where the text is filled in at run time.
    Empty when the source cannot be read (rigctl installed without its .py files)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    names = getattr(fn, "__globals__", {})
    found: list[str] = []
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in calls:
            where = calls[node.func.id]
            given = node.args[where] if len(node.args) > where else None
            given = next((k.value for k in node.keywords if k.arg == "fix"), given)
            text = _text(given, names)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "fix" for t in node.targets):
            text = _text(node.value, names)
        if text and text.strip("… ") and text not in found:
            found.append(text)
    return found[:MAX_FIXES]


def _text(node: ast.expr | None, names: dict[str, Any]) -> str | None:
    """A string expression's text: literal parts as written, ``…`` for each value filled in."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(part.value) if isinstance(part, ast.Constant) else "…" for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left, names), _text(node.right, names)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Name) and isinstance(names.get(node.id), str):  # a module's constant fix
        return str(names[node.id])
    if isinstance(node, ast.IfExp):
        return _text(node.body, names)
    return None
