"""rigctl: recipes, preflight, quadlet units and verification for self-hosted LLM serving.

Layers, bottom to top (imports only go downwards):

    errors, exitcodes, util      shared leaves
    recipe                       the recipe model and how recipes are found, loaded and overlaid
    host                         facts about the box, gathered once at the edge (NVML, podman, systemd, ...)
    preflight                    pure checks over (recipe, facts) -> findings
    render                       recipe (+ chosen GPUs, podman version) -> quadlet unit text
    verify                       prove a served model answers right (smoke, repetition, needle, soak)
    deploy                       install, start, wait through warmup, status, logs, down
    fleet                        doctor, swap, several hosts
    cli                          thin typer commands and the one text/JSON renderer
"""

__version__ = "0.1.0"
