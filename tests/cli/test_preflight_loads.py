"""What a preflight loads: no rich for a report printed to a pipe, no psutil where /proc answers, no
pynvml where the NVML library does not load, no concurrent.futures; the early podman and NVML start loads
no pydantic; `status` with nothing deployed and `--help` load no pydantic either. Asserted from
sys.modules of a real process (benchmarks/ time it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rigctl.host.nvml_lib import nvml_library_loads

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"
WATCHED = ("rich", "psutil", "pynvml", "concurrent.futures", "pydantic", "typer", "yaml")
PROBE = f"""
import json, sys
sys.argv = ["rigctl", *sys.argv[1:]]
from rigctl.cli.app import main
try:
    main()
except SystemExit:
    pass
sys.__stderr__.write("LOADED " + json.dumps([n for n in {WATCHED!r} if n in sys.modules]) + "\\n")
"""


def loaded(tmp_path: Path, *argv: str) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items() if k != "FORCE_COLOR"}
    nothing = {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
               "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60,
                          env={**env, **nothing}, check=False)
    line = next(x for x in done.stderr.splitlines() if x.startswith("LOADED "))
    modules: list[str] = json.loads(line.removeprefix("LOADED "))
    return modules, done


def test_a_replayed_preflight_loads_no_renderer_and_no_probes(tmp_path: Path) -> None:
    for extra in ([], ["--json"]):
        modules, done = loaded(tmp_path, "preflight", "qwen3-8b-vllm", "--inventory", str(FIXTURES / "h200.json"),
                               *extra)
        assert "gpu-count" in done.stdout  # (the probe itself exits 0: it catches SystemExit)
        assert modules == ["pydantic", "typer", "yaml"]


def test_a_preflight_of_this_host_loads_no_psutil(tmp_path: Path) -> None:
    modules, done = loaded(tmp_path, "preflight", "glm53-flash", "--json")
    assert json.loads(done.stdout)["command"] == "preflight"
    want = ["pynvml", "pydantic", "typer", "yaml"] if nvml_library_loads() else ["pydantic", "typer", "yaml"]
    assert modules == want


def test_starting_podman_early_loads_no_pydantic() -> None:
    code = ("import sys, rigctl.host.early\nwith rigctl.host.early.probes_started(): pass\n"
            "print(sorted(m for m in ('pydantic', 'yaml') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == "[]\n"


def test_status_with_nothing_deployed_and_help_load_no_models(tmp_path: Path) -> None:
    modules, done = loaded(tmp_path, "status", "--json")
    assert json.loads(done.stdout)["services"] == []
    assert modules == ["typer"]  # no pydantic, no YAML: nothing is there to validate
    modules, done = loaded(tmp_path, "--help")
    assert "preflight" in done.stdout
    assert modules == []
