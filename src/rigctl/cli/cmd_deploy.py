"""cmd_deploy: commands registered on the shared app (see cli/base.py)."""
