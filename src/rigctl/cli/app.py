"""Entry point: assembles the commands and owns the last-resort error handling."""

from __future__ import annotations

import sys
import traceback

from rigctl.cli import (  # noqa: F401 - importing a command module registers its commands
    cmd_deploy,
    cmd_fleet,
    cmd_preflight,
    cmd_recipes,
    cmd_render,
    cmd_verify,
)
from rigctl.cli.base import app
from rigctl.exitcodes import ExitCode


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(int(ExitCode.INTERRUPTED))
    except Exception:  # a traceback here is a bug by definition; say so
        traceback.print_exc()
        sys.stderr.write("rigctl: internal error (this is a bug in rigctl; please report the traceback above)\n")
        sys.exit(int(ExitCode.INTERNAL))
