"""One error root. Library errors are translated into these at the boundary; the CLI catches only
RigctlError and prints its message without a traceback. Anything else reaching the top is a bug."""

from __future__ import annotations

from rigctl.exitcodes import ExitCode


class RigctlError(Exception):
    """An expected failure with a message for the operator."""

    exit_code: ExitCode = ExitCode.INTERNAL
    code: str = "error"  # stable machine-readable code for the JSON envelope

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


class UsageError(RigctlError):
    exit_code = ExitCode.USAGE
    code = "usage"


class InvalidInputError(RigctlError):
    """A recipe, overlay, inventory or other input file that cannot be accepted.

    ``problems`` holds one ``file: dotted.path: problem`` line per defect."""

    exit_code = ExitCode.INVALID_INPUT
    code = "invalid-input"

    def __init__(self, problems: list[str], *, fix: str | None = None) -> None:
        self.problems = problems
        super().__init__("\n".join(problems), fix=fix)


class RecipeNotFoundError(InvalidInputError):
    code = "recipe-not-found"

    def __init__(self, name: str, searched: list[str], close: list[str] | None = None) -> None:
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        super().__init__(
            [f"{name}: no such recipe (searched: {', '.join(searched)})"],
            fix=f"{hint}run `rigctl recipes` to list them, or pass a path to a YAML file",
        )


class NotFoundError(RigctlError):
    """A named thing (a deployment) that is not there: worth a typo check, not a retry. A recipe that
    is not there stays RecipeNotFoundError, exit 3, as scripts have known it."""

    exit_code = ExitCode.NOT_FOUND
    code = "not-found"


class DeploymentNotFoundError(NotFoundError):
    code = "deployment-not-found"


class HostUnreachableError(RigctlError):
    """The remote box could not be asked at all; says nothing about the box's own state."""

    exit_code = ExitCode.HOST_UNREACHABLE
    code = "host-unreachable"


class DeployError(RigctlError):
    exit_code = ExitCode.DEPLOY_FAILED
    code = "deploy-failed"


class LockHeldError(DeployError):
    """Another rigctl is changing the same service; the same command later will likely succeed.

    A DeployError still (callers that refuse a deployment on any DeployError keep doing so), but with
    its own exit code, so a script can tell "retry later" from "it failed"."""

    exit_code = ExitCode.LOCK_HELD
    code = "lock-held"


class CommandError(RigctlError):
    """An outside command (podman, systemctl, ...) failed where failure was not an expected finding."""

    exit_code = ExitCode.DEPLOY_FAILED
    code = "command-failed"
