"""The "is it rigctl's" rule reads a ``.container``'s labels as the container gets them: the real quadlet
generator turns the unit into a ``podman run`` command line, and real podman keeps the last value of a
label. Before, the rule let ``Label=`` win over ``PodmanArgs=--label``, the other way round: a unit saying
``Label=rigctl.managed=true`` and ``PodmanArgs=--label rigctl.managed=false`` ran a container that is not
labelled rigctl's, and ``doctor --fix`` would still have counted it as rigctl's."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.conftest import require_or_skip

from rigctl.host.unit import MANAGED_LABEL, Unit

pytestmark = pytest.mark.timeout(120)

QUADLET = os.environ.get("RIGCTL_QUADLET") or "/usr/local/libexec/rigctl/quadlet"

CASES = {
    "label-true-args-false": "Label=rigctl.managed=true\nPodmanArgs=--label rigctl.managed=false\n",
    "label-false-args-true": "Label=rigctl.managed=false\nPodmanArgs=--label=rigctl.managed=true\n",
    "label-true-only": "Label=rigctl.managed=true\n",
    "args-true-only": "PodmanArgs=-l rigctl.managed=TRUE\n",
    "label-true-then-reset": "Label=rigctl.managed=true\nLabel=\n",
}


def local_image() -> str:
    done = subprocess.run(["podman", "images", "--format", "{{.Repository}}@{{.Digest}}"], capture_output=True,
                          text=True, timeout=60, check=False)
    images = [line for line in done.stdout.splitlines() if line.startswith("localhost/")]
    require_or_skip(bool(images), "a local image (.ci/testbed.sh up)")
    return images[0]


def generated_labels(tmp_path: Path, name: str, text: str) -> list[str]:
    """The ``--label`` words of the ``podman run`` quadlet generates for the unit, in order."""
    unit_dir = tmp_path / name
    unit_dir.mkdir()
    (unit_dir / f"{name}.container").write_text(text, encoding="utf-8")
    done = subprocess.run([QUADLET, "-no-kmsg-log", "-dryrun"], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "QUADLET_UNIT_DIRS": str(unit_dir)}, check=False)
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("ExecStart=")]
    words = shlex.split(line.removeprefix("ExecStart="))
    labels = []
    for i, word in enumerate(words):
        if word.startswith("--label="):
            labels.append(word.removeprefix("--label="))
        elif i and re.fullmatch(r"--label|-l", words[i - 1]):
            labels.append(word)
    return labels


def container_label(image: str, labels: list[str]) -> str | None:
    """What real podman labels a container created with those ``--label`` words, in that order."""
    argv = ["podman", "create", *(a for label in labels for a in ("--label", label)), image, "true"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    cid = done.stdout.strip().splitlines()[-1]
    try:
        shown = subprocess.run(["podman", "inspect", "--format", f'{{{{index .Config.Labels "{MANAGED_LABEL}"}}}}',
                                cid], capture_output=True, text=True, timeout=60, check=True)
        return shown.stdout.strip() or None
    finally:
        subprocess.run(["podman", "rm", "-f", cid], capture_output=True, timeout=60, check=False)


@pytest.mark.parametrize("case", list(CASES))
def test_the_rule_reads_the_label_the_container_gets(tmp_path: Path, case: str) -> None:
    require_or_skip(Path(QUADLET).is_file(), "the testbed's quadlet generator (RIGCTL_QUADLET)")
    require_or_skip(shutil.which("podman") is not None, "podman is not installed (.ci/testbed.sh up)")
    image = local_image()
    text = f"[Container]\nImage={image}\n{CASES[case]}"
    podman_says = container_label(image, generated_labels(tmp_path, case, text))
    ours = Unit.of(f"/etc/containers/systemd/{case}.container", text).managed
    assert ours is ((podman_says or "").lower() == "true"), (case, podman_says)
