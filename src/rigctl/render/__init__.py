"""The renderer: a recipe and the values the planner chose (the podman and quadlet to render for, the GPUs
to pin, the scope) in, unit files and manifests out. Pure: it reads no host facts and runs no program
(``tests/architecture`` checks it); ``rigctl.plan`` decides what a box has.

- ``units``: the quadlet ``.container`` unit (``render_units``), through ``templates/``;
- ``engines``: each engine's command line;
- ``escape``: every value as systemd and quadlet read it, or refused (``RenderError``);
- ``kube`` and ``kubelint``: Kubernetes and `podman kube play` manifests, and the rules they are held to.
"""
