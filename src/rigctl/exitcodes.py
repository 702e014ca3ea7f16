"""Exit codes, named in one place. Scripts and the fleet tooling depend on these numbers."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    CHECKS_FAILED = 1  # preflight/verify/doctor found failures
    USAGE = 2  # bad command line (typer/click use 2 as well)
    INVALID_INPUT = 3  # invalid recipe, overlay, inventory or other input file
    DEPLOY_FAILED = 4  # deployment failed, or a swap rolled back
    INTERNAL = 70  # a bug (EX_SOFTWARE); also a failed rollback
    INTERRUPTED = 130  # Ctrl-C
