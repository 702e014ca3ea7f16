"""cmd_render: commands registered on the shared app (see cli/base.py)."""
