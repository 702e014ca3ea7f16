"""What `render` prints: the units (or manifests) themselves on stdout, notes and warnings about them on
stderr, so that stdout can be piped straight into a file or `kubectl apply -f -`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from rigctl.cli.views.base import View
from rigctl.util.text import LINE_LIMIT, printable

if TYPE_CHECKING:
    from rigctl.preflight.layout import ChosenGpu
    from rigctl.render.kube import RenderedKube
    from rigctl.render.units import Note, RenderedUnits


def quadlet(rendered: RenderedUnits, files: Sequence[dict[str, Any]], warnings: Sequence[Note],
            gpus: Sequence[ChosenGpu]) -> View:
    """``files``: the payload's entries (name, install_path, path when written, text)."""

    def view(stream: TextIO) -> None:
        for note in warnings:  # stdout is the unit; a warning about it goes where warnings go
            sys.stderr.write(f"rigctl render: warning: {printable(note.message, LINE_LIMIT)}\n")
        for entry in files:
            where = f"wrote {entry['path']}; " if "path" in entry else ""
            stream.write(f"### {entry['name']} ({where}installs as {entry['install_path']})\n")
            stream.write(entry["text"])
            stream.write("\n")
        for note in rendered.notes:
            stream.write(f"note ({note.kind}): {note.message}\n")
        for g in gpus:
            stream.write(f"gpu {g.index}: {printable(g.name)} ({printable(g.uuid)})\n")
        stream.write(f"service: {rendered.service_name} ({rendered.scope})\n")

    return view


def kube(rendered: RenderedKube, files: Sequence[dict[str, Any]], notes: Sequence[Note], *, written: bool) -> View:
    """The manifests' YAML alone on stdout; with --out (``written``), the paths of the files written."""

    def view(stream: TextIO) -> None:
        for note in notes:
            sys.stderr.write(f"rigctl render: note ({note.kind}): {printable(note.message, LINE_LIMIT)}\n")
        if not written:
            stream.write(rendered.yaml_file.text)
            if rendered.service_name is not None:
                sys.stderr.write(f"rigctl render: --out DIR also writes {rendered.files[1].name}, the quadlet unit "
                                 "that runs these manifests under systemd\n")
            return
        for entry in files:
            stream.write(f"{entry['path']}\n")

    return view
