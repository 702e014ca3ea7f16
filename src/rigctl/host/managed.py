"""Whether a unit is rigctl's: the one rule ``rigctl status`` (which units to show) and ``doctor --fix``
(which units it may rewrite) share.

A unit is rigctl's when the labels its container gets carry ``rigctl.managed=true`` (any case), read
from the unit file alone: a drop-in, which anyone with a directory that applies to the unit may write,
cannot make a unit rigctl's. The labels are read the way podman gets them: ``Label=`` (a list key: an
empty assignment resets it, a later label wins) and ``--label``/``-l`` in ``PodmanArgs=``, or in the
``podman run`` of a ``.service``'s ``ExecStart=``.
"""

from __future__ import annotations

from rigctl.host.runargs import exec_words, parse_run, podman_args
from rigctl.host.unitfile import MergedUnit, UnitParseError, parse

MANAGED_LABEL = "rigctl.managed"


def label_pairs(words: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` words as a mapping; a later word wins."""
    pairs = (w.partition("=") for w in words if w)
    return {k: v for k, _, v in pairs}


def container_labels(unit: MergedUnit) -> dict[str, str]:
    """The labels of a quadlet ``.container``: ``PodmanArgs=`` labels, then ``Label=`` over them."""
    args = podman_args(unit.words("Container", "PodmanArgs"))
    return {**label_pairs(args.values("-l", "--label")), **label_pairs(unit.words("Container", "Label"))}


def service_labels(unit: MergedUnit) -> dict[str, str]:
    """The labels of the first ``podman run``/``docker run`` among a ``.service``'s ``ExecStart=``."""
    for entry in unit.all("Service", "ExecStart"):
        run = parse_run(exec_words(entry.value))
        if run is not None:
            return label_pairs(run.values("-l", "--label"))
    return {}


def is_managed(path: str, text: str) -> bool:
    """The rule, over the unit file's own text. A file its readers disagree on is nobody's."""
    try:
        own = MergedUnit.of(parse(path, text))
    except UnitParseError:
        return False
    labels = container_labels(own) if path.endswith(".container") else service_labels(own)
    return labels.get(MANAGED_LABEL, "").lower() == "true"
