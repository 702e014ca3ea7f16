"""The all_reduce probe's launch (``rigctl preflight --deep``): where it runs and with what, built from the
recipe and the chosen GPUs. Pure: the program's text is read from ``host/programs/allreduce.py`` and the
command built here; ``rigctl.plan.deep`` runs it and ``rigctl.preflight.allreduce_check`` judges what came back.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rigctl.podman_args import nvidia_device
from rigctl.recipe.model import Recipe

TIMEOUT_S = 150.0  # NCCL init plus a few all_reduces takes seconds; a hang never ends
OUTER_SLACK_S = 45.0  # the program kills its own ranks at TIMEOUT_S; this bounds the launcher itself
RESULT_TAG = "RIGCTL-ALLREDUCE "
_SELF = "SOURCE = None  # the launcher fills in this program's own text (``rigctl.host.allreduce_launch.program``)\n"


class _Gpu(Protocol):
    @property
    def uuid(self) -> str: ...


class GpuChoice(Protocol):
    """The GPUs the layout chose (``preflight.layout.Choice``), as far as a launch needs them."""

    @property
    def gpus(self) -> Sequence[_Gpu]: ...


@functools.cache
def program() -> str:
    """The probe's text, with its own text filled in (each rank is started as ``python3 -c`` of it)."""
    text = (Path(__file__).parent / "programs" / "allreduce.py").read_text(encoding="utf-8")
    if _SELF not in text:
        raise RuntimeError("host/programs/allreduce.py lost its SOURCE line")
    return text.replace(_SELF, f"SOURCE = {text!r}\n", 1)  # the ranks run the file's own text


@dataclass(frozen=True)
class Launch:
    """How the all_reduce will be launched: the command, its environment, and where it runs."""

    where: str  # "image" or "host"
    argv: list[str]
    env: dict[str, str]


def podman_launch(recipe: Recipe, choice: GpuChoice, *, mib: int = 256, iters: int = 20) -> Launch:
    """Inside the recipe's image, the chosen GPUs passed by CDI UUID, IPC as the unit will have it."""
    argv = ["podman", "run", "--rm", "--network=none", "--pull=never", "--entrypoint", "python3"]
    for gpu in choice.gpus:
        argv += ["--device", nvidia_device(gpu.uuid)]
    if recipe.container.ipc == "host":
        argv.append("--ipc=host")
    else:
        argv.append(f"--shm-size={recipe.container.shm_size or '8g'}")
    env = {"NCCL_DEBUG": "WARN", "RIGCTL_TIMEOUT": f"{TIMEOUT_S:g}"}
    for key in ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_P2P_LEVEL"):
        value = recipe.container.env.get(key) or recipe.engine.env.get(key)
        if value is not None:
            env[key] = value  # test what the engine will run with
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    argv += [recipe.image, "-c", program(), str(len(choice.gpus)), str(mib), str(iters)]
    return Launch("image", argv, {})


def host_launch(recipe: Recipe, choice: GpuChoice, python: str = "python3", *, mib: int = 256,
              iters: int = 20) -> Launch:
    """With a host Python that has torch; the chosen GPUs by UUID, in PCI bus order like the unit."""
    env = {"CUDA_VISIBLE_DEVICES": ",".join(g.uuid for g in choice.gpus), "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
           "NCCL_DEBUG": "WARN", "RIGCTL_TIMEOUT": f"{TIMEOUT_S:g}"}
    for key in ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_P2P_LEVEL"):
        value = recipe.container.env.get(key) or recipe.engine.env.get(key)
        if value is not None:
            env[key] = value
    return Launch("host", [python, "-c", program(), str(len(choice.gpus)), str(mib), str(iters)], env)


def nccl_env(launch: Launch, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The NCCL_* settings the all_reduce ran with: inside the image only what the launch passed with --env;
    on the host the caller's environment (``environ``) under the launch's own."""
    if launch.where == "image":
        pairs = [launch.argv[i + 1] for i, a in enumerate(launch.argv[:-1]) if a == "--env"]
        return {k: v for k, _, v in (p.partition("=") for p in pairs) if k.startswith("NCCL_")}
    return {k: v for k, v in {**(environ or {}), **launch.env}.items() if k.startswith("NCCL_")}


def launch_gpus(launch: Launch) -> list[str]:
    """The GPUs a launch targets (for messages)."""
    if launch.where == "host":
        return launch.env.get("CUDA_VISIBLE_DEVICES", "").split(",")
    return [a.split("=", 1)[1] for a in launch.argv if a.startswith(nvidia_device(""))]


def describe(launch: Launch) -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in launch.env.items())
    shown = [a if a != program() else "<program>" for a in launch.argv]
    return (env + " " if env else "") + shlex.join(shown)
