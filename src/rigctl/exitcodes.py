"""Exit codes, named in one place. Scripts and the fleet tooling depend on these numbers.

Each code means one thing, so a script can branch on it without reading messages: 5 (not found) is worth a
typo check, 6 (host unreachable) is the network and not the box, 75 (lock held) is worth retrying later.
75 is EX_TEMPFAIL and 70 EX_SOFTWARE from sysexits.h; the small numbers are rigctl's own. The README's
exit-code table is compared with this class by tests/cli/test_exit_codes.py."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # done; every check passed
    CHECKS_FAILED = 1  # preflight/verify/doctor found failures
    USAGE = 2  # bad command line (typer/click use 2 as well)
    INVALID_INPUT = 3  # invalid recipe, overlay, inventory or other input file; also a recipe not found
    DEPLOY_FAILED = 4  # deployment failed, or a swap rolled back
    NOT_FOUND = 5  # no such deployment (a name that is neither deployed nor a recipe)
    HOST_UNREACHABLE = 6  # ssh could not reach the host, or the host has no rigctl to run
    SERVICE_DOWN = 7  # status: a rigctl service is failed, restarting, down while deployed, not serving, or unknown
    INTERNAL = 70  # a bug (EX_SOFTWARE); also a failed rollback
    LOCK_HELD = 75  # another rigctl holds this service's lock; retry later (EX_TEMPFAIL)
    INTERRUPTED = 130  # Ctrl-C
