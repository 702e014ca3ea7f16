"""``rigctl preflight --deep``: the real all_reduce on the chosen GPUs, run where the engine will run (the
recipe's image through podman, with the GPUs by CDI) or with a host Python that has torch, then judged by
the check (``rigctl.preflight.allreduce_check``)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from rigctl.host.allreduce_launch import OUTER_SLACK_S, TIMEOUT_S, host_launch, nccl_env, podman_launch
from rigctl.host.cdi import nvidia_specs
from rigctl.host.facts import HostFacts
from rigctl.preflight.allreduce_check import classify
from rigctl.preflight.finding import Verdict, skip
from rigctl.preflight.layout import Choice
from rigctl.preflight.links import chosen_links
from rigctl.recipe.model import Recipe
from rigctl.util.proc import run


def _host_python_with_torch(candidates: Sequence[str] = ("python3",)) -> str | None:
    for python in candidates:
        if run([python, "-c", "import torch, torch.distributed"], timeout=60).ok:
            return python
    return None


def deep_allreduce(recipe: Recipe, facts: HostFacts, choice: Choice) -> dict[str, Verdict]:
    """Choose where to run (image via podman when the image and a CDI spec are here, else host torch)."""
    if len(choice.gpus) < 2:
        return {"gpu-allreduce": skip(f"{len(choice.gpus)} GPU chosen: no all_reduce between GPUs to test")}
    if not facts.gpu.available:
        return {"gpu-allreduce": skip("no GPUs visible")}
    image_here = facts.podman.image(recipe.image_digest) is not None  # as preflight's image check finds it
    if facts.podman.installed and image_here and nvidia_specs(facts.cdi):
        launch = podman_launch(recipe, choice)
    else:
        python = _host_python_with_torch()
        if python is None:
            return {"gpu-allreduce": skip(
                "cannot run the all_reduce: the recipe's image or a CDI spec is missing here, and no host python3 "
                "has torch (pull the image and generate the CDI spec, then run --deep again)")}
        launch = host_launch(recipe, choice, python)
    environ = {**os.environ, **launch.env}
    done = run(launch.argv, timeout=TIMEOUT_S + OUTER_SLACK_S, env=environ)
    links = chosen_links(facts.gpu, choice.indices)
    return {"gpu-allreduce": classify(done, launch, links=links, env=nccl_env(launch, os.environ))}
