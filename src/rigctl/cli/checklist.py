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
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rigctl.preflight.known_bad import Row

KINDS = ("preflight", "verify", "doctor")
MAX_FIXES = 6

# The deep check is not in preflight's CHECKS (it runs only with --deep); its words live with its code.
DEEP = {"gpu-allreduce": ("a real NCCL all_reduce over the chosen GPUs finishes, at the speed their link allows "
                          "(opt-in: preflight --deep)", "rigctl.preflight.allreduce_check", "classify")}


# Why a check exists, where its code has no docstring that says it (none, one that restates what it guards,
# or one about how it works): the failure it saves an operator from, as it would otherwise show up.
WHY: dict[str, str] = {
    "gpu-p2p": "a tensor-parallel engine moves activations between its GPUs at every layer; where P2P does "
               "not work, or the pair crosses CPU sockets, that traffic goes through host memory, several "
               "times slower, or NCCL hangs in warmup",
    "gpu-driver": "the engine image's CUDA runtime needs a driver at least this new; an older one fails at the "
                  "first CUDA call, minutes into the boot, and without NVML nothing about the GPUs can be judged",
    "gpu-count": "the engine shards the model over its tensor and pipeline ranks, one GPU each; with fewer "
                 "matching GPUs it cannot start, and says so only after loading",
    "gpu-model": "a recipe's memory, kernels and quantization are chosen for certain products; on another card "
                 "the numbers it promises do not hold, or the engine does not start",
    "gpu-memory": "the weights and the KV cache must fit each GPU; too little memory ends in an out-of-memory "
                  "error after the weights have loaded, or in a context shorter than the recipe serves",
    "gpu-compute-capability": "the image's kernels are built for certain architectures (FP8 needs sm_89 or "
                              "newer); on another the engine fails with 'no kernel image is available'",
    "gpu-busy": "memory another process holds is not there for the engine, which sizes its share of each GPU "
                "up front: it refuses to start or runs out of memory during warmup",
    "gpu-mig": "with MIG on, the container sees GPU instances, each a slice of the card's memory and compute, "
               "not the whole GPU the recipe is sized for",
    "gpu-power": "a lowered power limit throttles the clocks: the engine serves, slower than the recipe's "
                 "figures, and nothing in its logs says why",
    "shm": "the engine's workers (and NCCL between GPUs) exchange tensors through /dev/shm; podman's default "
           "64 MB makes them die with a bus error or an NCCL error",
    "ipc-shm": "podman refuses to start a container with host IPC and an explicit shm size together: the "
               "unit would fail on every start",
    "podman": "quadlet arrived with podman 4.4, and keys such as Notify=healthy need 5.0; with an older podman "
              "the generator makes no service, or one that ignores what the unit asks",
    "image": "the unit pins the image by digest; one not present locally is pulled by the first start, "
             "several GB inside the warmup budget",
    "cdi": "the GPUs reach the container through a CDI spec; without one, or with one generated for another "
           "driver, podman cannot add the devices and the container does not start",
    "checkpoint": "a missing, partial or truncated checkpoint shows only after minutes of loading; counting "
                  "the shards and their bytes (and their sha256 with --checksums) finds it before the boot",
    "draft": "the speculative-decoding draft model is loaded beside the main one: a missing or partial one "
             "fails the boot as a missing checkpoint does",
    "license": "some model licences must be accepted before use; rigctl records who accepted which "
               "(--accept-license) rather than serve such a model unasked",
    "disk": "a checkpoint needs room to be downloaded into, and compile caches and logs grow during warmup: "
            "a full disk fails the boot partway",
    "port": "another process on the publish port makes the container fail to start (address in use), or "
            "answers at the endpoint in the engine's place",
    "systemd": "quadlet units are run by a systemd manager, the system's or the user's (with linger, to "
               "outlive the login); without one nothing starts them",
    "known-bad": "some combinations of engine, GPU generation, NCCL and settings fail on every box that has "
                 "them (at CUDA graph capture, at the first large collective); rigctl ships a table of those "
                 "(listed below), and a recipe's own known_issues.bad_combinations rows extend it. One that "
                 "holds here would fail the same way, after the whole boot",
    "smoke": "a model that loads but answers wrong (a broken chat template, a wrong tokenizer, corrupt "
             "weights) passes every health check; known answers at temperature 0 catch it",
    "determinism": "at temperature 0 the same request must give the same text; when it does not, batching or "
                   "a kernel is nondeterministic, and every other comparison is noise",
}


@dataclass(frozen=True)
class CheckInfo:
    id: str
    kind: str  # preflight | verify | doctor
    summary: str  # what it guards, one line
    # why: the check's docstring (or, for a deep check, its module's), else WHY's; a doctor rule's own ``why``
    about: str | None = None
    severity: str = "fail"  # what a problem it finds is, at most (a doctor rule's default; a hit may lower it)
    force: bool | None = None  # preflight: whether `--force ID` turns its fail into a warning; None elsewhere
    fixes: list[str] = field(default_factory=list)  # the fixes it can suggest
    source: str = ""  # module.function, for whoever wants to read it
    table: KnownBadTable | None = None  # known-bad only: the bundled rows it judges


@dataclass(frozen=True)
class KnownBadRow:
    """One row of the bundled known-bad table, as ``checks`` and ``explain`` show it."""

    id: str
    severity: str
    when: str  # the row's conditions, in words
    problem: str  # what breaks
    error: str | None  # what the failure prints
    fix: str
    source: str | None  # where it was reported


@dataclass(frozen=True)
class KnownBadTable:
    rows: list[KnownBadRow]
    extended_by: str  # where a recipe adds rows of its own


EXTENDED_BY = "a recipe's own known_issues.bad_combinations rows, judged after these"


def all_checks() -> list[CheckInfo]:
    """Every check, in each registry's order: preflight, verify, doctor."""
    return [*_preflight(), *_verify(), *_doctor()]


def find(check_id: str) -> list[CheckInfo]:
    """The checks of this id (one, unless two kinds share an id)."""
    return [c for c in all_checks() if c.id == check_id]


def _preflight() -> Iterator[CheckInfo]:
    from rigctl.preflight.registry import CHECKS  # noqa: PLC0415 - the registries load only for these commands

    for check in CHECKS:
        fixes = fixes_in(check.fn, {"fail": 1, "warn": 1})
        table = None
        if check.id == "known-bad":  # its fixes are its rows' (its source only joins them)
            table = known_bad_table()
            fixes = dedupe([r.fix for r in table.rows] + ["a recipe's own row: its remedy"])
        yield CheckInfo(check.id, "preflight", check.summary, _why(check.id, check.summary, _doc(check.fn)), "fail",
                        check.forceable, fixes, _where(check.fn), table)
    for check_id, (summary, module_name, function) in DEEP.items():
        module = importlib.import_module(module_name)
        fn = getattr(module, function)
        yield CheckInfo(check_id, "preflight", summary, _why(check_id, summary, _doc(module)), "fail", True,
                        fixes_in(fn, {"fail": 1, "warn": 1, "Verdict": 2}), _where(fn))


def known_bad_table() -> KnownBadTable:
    """The bundled known-bad rows: the check's fixes are the rows' own, which its source cannot show."""
    from rigctl.preflight.known_bad import bundled  # noqa: PLC0415

    rows = [KnownBadRow(r.id, r.severity, _conditions(r), " ".join(r.problem.split()), r.error, r.fix, r.source)
            for r in bundled()]
    return KnownBadTable(rows, EXTENDED_BY)


def _conditions(row: Row) -> str:
    """A row's conditions as one line: ``vllm; sm 12.0/12.1; TP >= 2; unless --disable-custom-all-reduce``."""
    said: list[str] = []
    for label, values in (("family", row.families), ("format", row.checkpoint_formats),
                          ("engine", row.engine_kinds), ("sm", row.compute_capabilities), ("NCCL", row.nccl_versions)):
        if values is not None:
            said.append(f"{label} {'/'.join(values)}")
    if row.attention_backends is not None:
        said.append("attention " + "/".join(b or "default" for b in row.attention_backends))
    if row.engine_from is not None or row.engine_below is not None:
        said.append("version " + (f">= {row.engine_from}" if row.engine_from else "")
                    + (" and " if row.engine_from and row.engine_below else "")
                    + (f"< {row.engine_below}" if row.engine_below else ""))
    if row.min_tensor_parallel is not None:
        said.append(f"TP >= {row.min_tensor_parallel}")
    if row.unless_args:
        said.append("unless " + " or ".join(row.unless_args))
    return "; ".join(said) or "always"


def _verify() -> Iterator[CheckInfo]:
    from rigctl.verify.checks import REGISTRY  # noqa: PLC0415

    for check_id, check in REGISTRY.items():
        # a check judged after the run (repetition) says what it guards in its judge's docstring
        about = " ".join(d for d in (_doc(check.judge) if check.judge else None, _doc(check.run)) if d) or None
        summary = (about or check_id).split(". ")[0].split("; ")[0].rstrip(".")
        yield CheckInfo(check_id, "verify", summary, _why(check_id, summary, about), "fail", None, [],
                        _where(check.run))


def _doctor() -> Iterator[CheckInfo]:
    from rigctl.doctor.rules import REGISTRY  # noqa: PLC0415

    for rule in REGISTRY:
        # the rule's own words: a function's or module's docstring is written for whoever reads the code
        about = _why(rule.id, rule.summary, rule.why or None)
        yield CheckInfo(rule.id, "doctor", rule.summary, about, str(rule.severity), None,
                        fixes_in(rule.check, {"Hit": 1, "HostHit": 2}), _where(rule.check))


def _doc(obj: object) -> str | None:
    text = inspect.getdoc(obj)
    return " ".join(text.split()) if text else None


def _why(check_id: str, summary: str, doc: str | None) -> str | None:
    """What ``explain`` says under "why": the WHY entry, else the docstring past what ``summary`` already
    says (verify's summary is its docstring's first sentence): never the summary again."""
    rest = WHY.get(check_id, doc)
    if rest is not None and rest.startswith(summary):
        rest = rest[len(summary):].lstrip(".;: ")
    if not rest:
        return None
    return rest[0].upper() + rest[1:] + ("" if rest.endswith(".") else ".")


def dedupe(fixes: list[str]) -> list[str]:
    """The fixes without one that another says in full: "install podman >= 5.0" goes where "install podman
    >= 5.0, or a quadlet generator from a newer release" is also suggested."""
    def core(text: str) -> str:
        return text.replace("…", "").strip(" .,;:")

    kept = [f for f in fixes if not any(other != f and core(f) and core(f) in other for other in fixes)]
    return list(dict.fromkeys(kept))


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
    return dedupe(found)[:MAX_FIXES]


def _text(node: ast.expr | None, names: dict[str, Any]) -> str | None:
    """A string expression's text: literal parts as written, ``…`` for each value filled in."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_part(part, names) for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left, names), _text(node.right, names)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Name) and isinstance(names.get(node.id), str):  # a module's constant fix
        return str(names[node.id])
    if isinstance(node, ast.IfExp):
        return _text(node.body, names)
    return None


def _part(part: ast.expr, names: dict[str, Any]) -> str:
    """One piece of an f-string: its literal text, a module constant's value (``{RESTART_SEC}``), else ``…``."""
    if isinstance(part, ast.Constant):
        return str(part.value)
    if isinstance(part, ast.FormattedValue) and part.conversion == -1 and part.format_spec is None \
            and isinstance(part.value, ast.Name) and isinstance(names.get(part.value.id), str | int):
        return str(names[part.value.id])
    return "…"
