"""cmd_fleet: commands registered on the shared app (see cli/base.py)."""
