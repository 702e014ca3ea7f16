"""rigctl: recipes, preflight, quadlet units and verification for self-hosted LLM serving.

Layers, bottom to top (imports only go downwards; tests/architecture/test_layers.py enforces it):

    exitcodes, errors, util      shared leaves
    findings, places             the one result vocabulary; scope and where units, records and locks live
    podman_versions              which quadlet keys each podman version takes
    recipe                       the recipe model and how recipes are found, loaded and overlaid
    host                         facts about the box, gathered once at the edge (NVML, podman, systemd, ...)
    preflight                    pure checks over (recipe, facts) -> findings
    render                       recipe (+ chosen GPUs, podman version) -> quadlet units, Kubernetes manifests
    verify                       prove a served model answers right (smoke, repetition, needle, soak)
    adapters                     systemd, podman, journal, HTTP probe, clock, GPU memory behind small Protocols
    deploy                       plan, up, swap, down, status, logs, deployment records
    doctor                       audit every serving unit on a box, and fix what is safe to fix
    fleet                        several hosts over ssh (rigctl's hosts file, Ansible inventories)
    cli                          thin typer commands, the text views and the one JSON/text emitter
"""

__version__ = "0.1.0"
