"""cmd_verify: commands registered on the shared app (see cli/base.py)."""
