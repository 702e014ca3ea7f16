"""One unit: a unit file and the drop-ins that apply to it, each parsed once, and what rigctl derives
from them, worked out once and kept on the value (podman's quadlet ``UnitFile``, pkg/systemd/parser:
parse, look a key up, merge the drop-ins, edit, write back with comments and order kept).

``rigctl status`` (which units are rigctl's, their endpoint and image), ``doctor`` (the audit, the rules'
context, what a unit serves), ``doctor --fix`` (edits applied to the parsed lines: ``Unit.edits``) and
``fleet doctor`` all take this value; none of them reads a text again. The parsing and the line edits
themselves are ``rigctl.host.unitfile``'s; where the files are found, ``rigctl.host.unitdirs``'.

Whose unit it is (``managed``): the labels its container gets carry ``rigctl.managed=true`` (any case),
read from the unit file alone: a drop-in, which anyone with a directory that applies to the unit may
write, cannot make a unit rigctl's. It can take it back: when the unit with its drop-ins applied no
longer labels the container so, podman does not, and neither does rigctl. The labels are read the way
podman gets them: ``Label=`` (a list key: an empty assignment resets it, a later label wins), then
``--label``/``-l`` in ``PodmanArgs=``, which quadlet writes after them; or those in the ``podman run`` of
a ``.service``'s ``ExecStart=``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, TypeVar

from rigctl.host.runargs import exec_words, parse_run
from rigctl.host.serving import ServingSpec, UnitKind, describe
from rigctl.host.unitfile import MergedUnit, ParsedFile, UnitParseError, parse
from rigctl.places import quadlet_service
from rigctl.podman_args import podman_args
from rigctl.util.publish import endpoint_of

SearchScope = Literal["system", "user", "path"]
MANAGED_LABEL = "rigctl.managed"
_T = TypeVar("_T")


def _or_raise(read: _T | UnitParseError) -> _T:
    """A reading kept with its failure: the value, or the UnitParseError raised again."""
    if isinstance(read, UnitParseError):
        raise read
    return read


@dataclass(frozen=True)
class SourceFile:
    """One file of a unit (the unit file or a drop-in), as read: parsed the first time it is asked for,
    then never again. A drop-in shared by several units is one SourceFile (``unitdirs.collect``), so it is
    parsed once for all of them. Kept apart from the unit's other files: a finding names the file that
    holds its line, and a fix rewrites that file."""

    path: str
    text: str

    @cached_property
    def _read(self) -> ParsedFile | UnitParseError:
        try:
            return parse(self.path, self.text)
        except UnitParseError as exc:
            return exc

    @property
    def parsed(self) -> ParsedFile:
        """Raises UnitParseError for a file its readers disagree on or its reader refuses."""
        return _or_raise(self._read)

    @property
    def readable(self) -> bool:
        return not isinstance(self._read, UnitParseError)


def generated_service(main: SourceFile) -> str:
    """The service quadlet generates from a ``.container`` (its own ``ServiceName=``: the name its drop-in
    directories are looked up by, before any drop-in is known). An unreadable file keeps its default name:
    the audit reports it, and its drop-ins are still gathered by name."""
    if main.readable:
        for entry in main.parsed.entries:
            if entry.section == "Container" and entry.key == "ServiceName" and entry.value:
                return entry.value if entry.value.endswith(".service") else entry.value + ".service"
    return quadlet_service(main.path)


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


@dataclass(frozen=True)
class Unit:
    """A unit file as found on a host, with the drop-ins that apply to it (in the order systemd applies
    them), each file parsed once; everything derived from them is worked out on first use and kept."""

    main: SourceFile
    dropins: tuple[SourceFile, ...] = ()
    scope: SearchScope = "path"

    @staticmethod
    def of(path: str, text: str, dropins: tuple[SourceFile, ...] = (), scope: SearchScope = "path") -> Unit:
        return Unit(SourceFile(path, text), dropins, scope)

    @property
    def path(self) -> str:
        return self.main.path

    @property
    def text(self) -> str:
        return self.main.text

    @property
    def kind(self) -> UnitKind:
        return "container" if self.path.endswith(".container") else "service"

    @property
    def files(self) -> tuple[SourceFile, ...]:
        return (self.main, *self.dropins)

    def texts(self) -> dict[str, str]:
        return {f.path: f.text for f in self.files}

    def with_texts(self, texts: Mapping[str, str]) -> Unit:
        """The unit with some of its files holding new texts (what ``--fix`` wrote): those files are read
        again, the others keep what was parsed of them."""
        def new(f: SourceFile) -> SourceFile:
            return SourceFile(f.path, texts[f.path]) if f.path in texts and texts[f.path] != f.text else f

        return Unit(new(self.main), tuple(new(d) for d in self.dropins), self.scope)

    @cached_property
    def _merged(self) -> MergedUnit | UnitParseError:
        try:
            return MergedUnit.of(self.main.parsed, [d.parsed for d in self.dropins])
        except UnitParseError as exc:
            return exc

    @property
    def merged(self) -> MergedUnit:
        """Every assignment of the unit, its drop-ins applied. Raises UnitParseError when one of its files
        cannot be read without guessing."""
        return _or_raise(self._merged)

    @cached_property
    def readable_keys(self) -> MergedUnit:
        """The keys as far as they can be read (``status``): none when the unit file cannot be, and without
        the drop-ins that cannot be."""
        if not self.main.readable:
            return MergedUnit(files=())
        return MergedUnit.of(self.main.parsed, [d.parsed for d in self.dropins if d.readable])

    def _labels_of(self, keys: MergedUnit) -> dict[str, str]:
        return container_labels(keys) if self.kind == "container" else service_labels(keys)

    @cached_property
    def labels(self) -> dict[str, str]:
        """The labels its container gets, drop-ins applied. Raises UnitParseError like ``merged``."""
        return self._labels_of(self.merged)

    @property
    def service(self) -> str | None:
        """The service systemd runs from it: quadlet's NAME.service for NAME.container (or the ServiceName= its
        files say, drop-ins applied), a .service file's own name; None for a template, which runs under other
        names. (Its drop-in directories are looked up by ``generated_service``: the main file's say alone.)"""
        name = self.path.rsplit("/", 1)[-1]
        if self.kind == "container":
            try:
                given = self.merged.value("Container", "ServiceName")
            except UnitParseError:
                given = None
            stem = given.removesuffix(".service") if given else name.removesuffix(".container")
            return None if stem.endswith("@") or not stem else f"{stem}.service"
        return None if name.endswith("@.service") or not name.endswith(".service") else name

    @cached_property
    def serving(self) -> ServingSpec | None:
        """What it serves (``host.serving``: image, engine, ports, options); None: a .service that runs no
        container and no known engine. Raises UnitParseError, as ``merged`` does."""
        return describe(self.merged, self.kind)

    @cached_property
    def managed(self) -> bool:
        """Whether it is rigctl's: the unit file's own text says so, and still does with the drop-ins
        applied. A unit with a file its readers disagree on is nobody's (doctor reports it unreadable)."""
        if isinstance(self._merged, UnitParseError):
            return False
        own = self._labels_of(MergedUnit.of(self.main.parsed))
        return all(labels.get(MANAGED_LABEL, "").lower() == "true" for labels in (own, self.labels))

    @cached_property
    def publish(self) -> tuple[str, ...]:
        """Its ``PublishPort=`` values, as far as they can be read."""
        return tuple(self.readable_keys.words("Container", "PublishPort"))

    @cached_property
    def endpoint(self) -> str | None:
        """From the first ``PublishPort=`` that names a host port, as a client here reaches it (``util.publish``:
        a port published on every address is reached over loopback, an IPv6 address bracketed)."""
        return next((url for word in self.publish if (url := endpoint_of(word)) is not None), None)

    def edits(self) -> UnitEdits:
        """A working copy of its parsed files for ``doctor --fix`` to edit."""
        return UnitEdits(self, {f.path: f.parsed for f in self.files})


@dataclass
class UnitEdits:
    """Edits to the files of one unit, applied to their parsed lines (``rigctl.host.unitfile``'s edits, one
    ParsedFile to the next); the new texts are spelt once, by ``changed``."""

    unit: Unit
    files: dict[str, ParsedFile]  # path -> the file as edited so far

    def changed(self) -> dict[str, str]:
        """{path: new text} of every file an edit changed."""
        out: dict[str, str] = {}
        for f in self.unit.files:
            edited = self.files[f.path]
            if edited.source is None and (text := edited.text) != f.text:
                out[f.path] = text
        return out
