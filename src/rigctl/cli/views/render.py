"""What `render` prints: the units (or manifests) themselves on stdout, notes and warnings about them on
stderr, so that stdout can be piped straight into a file or `kubectl apply -f -`.

A quadlet render prints one unit, the ``.container`` file: that is what `rigctl render RECIPE > NAME.container`
must leave. Should a recipe ever render more files than that, stdout still holds the ``.container`` alone
and stderr names the others, which `--out DIR` writes (as `--target podman-kube` does with its .kube unit):
files joined on one stream would make neither of them a valid unit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from rigctl.cli.output import note, warn
from rigctl.cli.views.draw import View
from rigctl.util.text import LINE_LIMIT, printable

if TYPE_CHECKING:
    from rigctl.plan.rendering import QuadletResult
    from rigctl.render.kube import RenderedKube
    from rigctl.render.units import Note


def quadlet(result: QuadletResult, *, written: bool) -> View:
    """The .container's text on stdout (with --out: the paths written); about it, on stderr: where each
    file installs, the notes, the GPUs, the service and the podman it is for."""

    def view(stream: TextIO) -> None:
        from rigctl.podman_versions import fmt

        rendered = result.rendered
        for said in result.warnings:  # stdout is the unit; a warning about it goes where warnings go
            if said.kind == "warning":  # shown with --quiet too: it is about the unit on stdout
                warn(f"rigctl render: warning: {printable(said.message, LINE_LIMIT)}")
            else:
                note(f"rigctl render: note ({said.kind}): {printable(said.message, LINE_LIMIT)}")
        for entry in result.files:
            where = f"wrote {entry['path']}; " if "path" in entry else ""
            note(f"rigctl render: ### {entry['name']} ({where}installs as {entry['install_path']})")
        if written:
            stream.writelines(f"{entry['path']}\n" for entry in result.files)
        else:
            stream.write(rendered.container_file.text)
        stream.flush()
        others = [f.name for f in rendered.files if f is not rendered.container_file]
        if others and not written:
            note(f"rigctl render: --out DIR also writes {', '.join(others)}")
        for n in rendered.notes:
            note(f"rigctl render: note ({n.kind}): {printable(n.message, LINE_LIMIT)}")
        for g in result.gpus:
            note(f"rigctl render: gpu {g.index}: {printable(g.name)} ({printable(g.uuid)})")
        quadlet = "" if rendered.quadlet_version == rendered.podman_version else (
            f" with quadlet {fmt(rendered.quadlet_version)}")
        note(f"rigctl render: service: {rendered.service_name} ({rendered.scope}), for podman "
             f"{fmt(rendered.podman_version)}{quadlet} ({_FROM[result.versions_from]})")

    return view


_FROM = {"option": "as given", "inventory": "the inventory's", "host": "this host's",
         "default": "the default"}


def kube(rendered: RenderedKube, files: Sequence[dict[str, Any]], notes: Sequence[Note], *, written: bool) -> View:
    """The manifests' YAML alone on stdout; with --out (``written``), the paths of the files written."""

    def view(stream: TextIO) -> None:
        for n in notes:
            if n.kind == "warning":
                warn(f"rigctl render: warning: {printable(n.message, LINE_LIMIT)}")
            else:
                note(f"rigctl render: note ({n.kind}): {printable(n.message, LINE_LIMIT)}")
        if not written:
            stream.write(rendered.yaml_file.text)
            if rendered.service_name is not None:
                note(f"rigctl render: --out DIR also writes {rendered.files[1].name}, the quadlet unit that runs "
                     "these manifests under systemd")
            return
        for entry in files:
            stream.write(f"{entry['path']}\n")

    return view
