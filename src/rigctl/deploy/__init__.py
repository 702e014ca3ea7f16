"""Deploy on this host through podman quadlets and systemd: ``plan`` (what `up` would do: preflight, GPUs,
the rendered unit), ``up`` (carry a plan out), ``swap`` (replace one deployment by another, with rollback),
``down``, ``status``, ``logs``; ``install`` and ``state`` write the unit files and rigctl's records,
``warmup`` watches a start. Outside systems come in as ``rigctl.adapters``; callers take the locks."""
