"""cmd_preflight: commands registered on the shared app (see cli/base.py)."""
