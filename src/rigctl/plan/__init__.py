"""The planner: the one place a recipe meets a box.

``plan.plan.make_plan`` is preflight over (recipe, facts), the GPUs the layout picked and the unit rendered
for the podman and quadlet those facts describe: `up --dry-run` prints it, `up` carries it out, `swap` makes
one for what it brings in. `preflight` (``plan.here``) and `render` (``plan.rendering``) are views of the same
rules: which podman and generator (``plan.plan.podman_target``), which GPUs (``plan.plan.place_gpus``). Below this
package, ``preflight`` only judges facts and ``render`` only turns values into files; neither runs a program.
"""
