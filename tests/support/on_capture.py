"""rigctl run as an operator runs it (a process of its own), with NVML answering from a captured box: the one
part of the host the tests fake (``tests.support.nvml_fake``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import rigctl.host.nvml_lib as nvml_lib
from tests.support.nvml_fake import FakeNvml
capture = json.loads(open(sys.argv[2]).read())
nvml_lib.nvml_library_loads = lambda: True
nvml_lib.load_pynvml = lambda: FakeNvml(capture)
sys.argv = ["rigctl", *sys.argv[3:]]
from rigctl.cli.app import main
main()
"""


def rigctl_on_capture(capture: Path, *args: str, env: Mapping[str, str] | None = None,
                      timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``rigctl ARGS...`` with NVML replaying ``capture`` (an NVML capture, tests/fixtures/inventory)."""
    return subprocess.run([sys.executable, "-c", SCRIPT, str(REPO), str(capture), *args], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
