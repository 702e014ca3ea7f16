"""rigctl ends its process without the interpreter's teardown (``app._exit_now``): exit callbacks still run,
stdout and stderr are flushed, the exit status is the command's; a program that calls ``main`` itself
gets control back; a thread still running is waited for as the interpreter would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"

AS_RIGCTL = """
import atexit, sys, threading, time
atexit.register(lambda: print("exit callback ran", flush=True))
if "--thread" in sys.argv:
    sys.argv.remove("--thread")
    def late():  # still running when main() ends, however slow the machine: it waits for the main thread
        deadline = time.monotonic() + 30
        while threading.main_thread().is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        print("thread finished", flush=True)
    threading.Thread(target=late).start()
from rigctl.cli.app import main
main()
print("after main")
"""


def as_rigctl(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``main`` from a script named rigctl, as the console script does."""
    script = tmp_path / "rigctl"
    script.write_text(AS_RIGCTL)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    return subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def test_the_program_ends_with_its_status_output_and_exit_callbacks(tmp_path: Path) -> None:
    done = as_rigctl(tmp_path, "preflight", "qwen3-8b-vllm", "--inventory", str(FIXTURES / "h200.json"), "--json")
    assert done.returncode == 1  # checks failed: the command's own status
    document, _, rest = done.stdout.rpartition("}\n")
    assert json.loads(document + "}")["command"] == "preflight"  # all of it, flushed
    assert rest == "exit callback ran\n"  # atexit ran; nothing after main() did
    usage = as_rigctl(tmp_path, "preflight", "--no-such-option")
    assert usage.returncode == 2 and "No such option" in usage.stderr and usage.stdout == "exit callback ran\n"
    bad = as_rigctl(tmp_path, "preflight", "no-such-recipe", "--json")
    assert bad.returncode == 3 and json.loads(bad.stdout.removesuffix("exit callback ran\n"))["ok"] is False


def test_a_thread_still_running_is_waited_for(tmp_path: Path) -> None:
    done = as_rigctl(tmp_path, "--thread", "recipes", "--json")
    assert done.returncode == 0
    assert done.stdout.endswith("thread finished\nexit callback ran\n")  # the interpreter's own order
    assert "after main" not in done.stdout


def test_a_program_calling_main_gets_control_back(tmp_path: Path) -> None:
    code = ("import sys\nsys.argv = ['rigctl', 'recipes', '--json']\nfrom rigctl.cli.app import main\n"
            "try:\n    main()\nexcept SystemExit as done:\n    print('back with', done.code)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.endswith("back with 0\n")


def test_python_m_rigctl_keeps_its_status_and_output() -> None:
    done = subprocess.run([sys.executable, "-m", "rigctl", "preflight", "qwen3-8b-vllm", "--inventory",
                           str(FIXTURES / "h200.json"), "--json"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 1 and json.loads(done.stdout)["recipe"] == "qwen3-8b-vllm"
