"""Whether a unit is rigctl's: the one rule ``rigctl status`` (which units to show) and ``doctor --fix``
(which units it may rewrite) share.

A unit is rigctl's when the labels its container gets carry ``rigctl.managed=true`` (any case), read
from the unit file alone: a drop-in, which anyone with a directory that applies to the unit may write,
cannot make a unit rigctl's. It can take it back: when the unit with its drop-ins applied (as
``rigctl.host.unitdirs`` finds them) no longer labels the container so, podman does not, and neither
does rigctl. The labels are read the way podman gets them: ``Label=`` (a list key: an empty assignment
resets it, a later label wins), then ``--label``/``-l`` in ``PodmanArgs=``, which quadlet writes after
them; or those in the ``podman run`` of a ``.service``'s ``ExecStart=``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rigctl.host.runargs import exec_words, parse_run, podman_args
from rigctl.host.unitdirs import DropIn
from rigctl.host.unitfile import MergedUnit, UnitParseError, parse

MANAGED_LABEL = "rigctl.managed"


def label_pairs(words: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` words as a mapping; a later word wins."""
    pairs = (w.partition("=") for w in words if w)
    return {k: v for k, _, v in pairs}


def container_labels(unit: MergedUnit) -> dict[str, str]:
    """The labels of a quadlet ``.container``: ``Label=`` labels, then ``PodmanArgs=`` labels over them.
    Quadlet writes ``PodmanArgs=`` after the ``--label`` words of ``Label=``, and podman keeps the last
    value of a label: a unit that says ``Label=rigctl.managed=true`` and ``PodmanArgs=--label
    rigctl.managed=false`` runs a container that is not labelled rigctl's."""
    args = podman_args(unit.words("Container", "PodmanArgs"))
    return {**label_pairs(unit.words("Container", "Label")), **label_pairs(args.values("-l", "--label"))}


def service_labels(unit: MergedUnit) -> dict[str, str]:
    """The labels of the first ``podman run``/``docker run`` among a ``.service``'s ``ExecStart=``."""
    for entry in unit.all("Service", "ExecStart"):
        run = parse_run(exec_words(entry.value))
        if run is not None:
            return label_pairs(run.values("-l", "--label"))
    return {}


def _says_managed(path: str, unit: MergedUnit) -> bool:
    labels = container_labels(unit) if path.endswith(".container") else service_labels(unit)
    return labels.get(MANAGED_LABEL, "").lower() == "true"


def is_managed(path: str, text: str, dropins: Sequence[DropIn] = ()) -> bool:
    """The rule: the unit file's own text says so, and still does with ``dropins`` applied. A file its
    readers disagree on, the unit or one of its drop-ins, is nobody's (doctor reports it unreadable)."""
    try:
        own = parse(path, text)
        merged = MergedUnit.of(own, [parse(d.path, d.text) for d in dropins])
    except UnitParseError:
        return False
    return _says_managed(path, MergedUnit.of(own)) and _says_managed(path, merged)
