"""Escaping values for quadlet ``.container`` files so that what reaches the container is exactly the
recipe's value.

A value travels through two parsers. Quadlet reads the ``.container`` file and writes a ``.service``
whose ``ExecStart=`` carries the value; systemd then parses that line. What each stage does, as seen
with quadlet 5.4.2 (``quadlet -dryrun``) and systemd 252:

* Word-split keys (``Exec``, ``Environment``, ``Label``, ``PodmanArgs``): quadlet splits the value into
  words the systemd way (double or single quotes, C escapes such as ``\\\\`` and ``\\"``), then
  re-quotes each word itself for ``ExecStart``. ``%`` and ``$`` pass through untouched.
* Raw keys (``Volume``, ``PublishPort``, ``Secret``, ``HealthCmd``, ``Entrypoint``, ``Image`` ...):
  quadlet takes the value verbatim (quotes stay literal, surrounding whitespace is trimmed) and quotes
  it as one word for ``ExecStart``.
* systemd then expands specifiers (``%%`` is a literal ``%``) and environment variables (``$$`` is a
  literal ``$``) in ``ExecStart``, so both must be doubled in every value.

Quadlet quirks that cannot be escaped around, so they are refused: an empty word (quadlet drops it
and every word after it), a word that is exactly ``;`` (quadlet writes it bare and systemd reads it
as a command separator), a raw value with whitespace at either end (trimmed) or a trailing backslash
(a line continuation), and any line break or control character: C0, DEL, C1 (U+0085 ...), U+2028, U+2029
(the recipe model refuses those already; ``rigctl.recipe.model.control_problem`` is the one rule).
"""

from __future__ import annotations

import re

from rigctl.errors import RigctlError
from rigctl.exitcodes import ExitCode
from rigctl.recipe.model import control_problem


class RenderError(RigctlError):
    """The recipe cannot be turned into a unit for the target podman, or a value cannot be carried."""

    exit_code = ExitCode.INVALID_INPUT
    code = "render-refused"


# Words made only of these need no quotes in either parser; anything else is double-quoted.
_BARE = re.compile(r"[A-Za-z0-9_.,/:=+@-]+")


def _check_common(value: str, what: str) -> None:
    # the recipe model's rule (C0, DEL, C1 such as U+0085, U+2028, U+2029), for values that did not
    # come through the model (labels, paths computed at render time)
    problem = control_problem(value)
    if problem:
        raise RenderError(
            f"{what}: {value!r} {problem}",
            fix="remove the line break or control character from the value",
        )


def _double_specials(value: str) -> str:
    # systemd: %% is a literal %, $$ a literal $ in ExecStart (specifiers, then variables).
    return value.replace("%", "%%").replace("$", "$$")


def word(value: str, what: str = "value") -> str:
    """One word for a word-split key (Exec, Environment, Label, PodmanArgs)."""
    _check_common(value, what)
    if value == "":
        raise RenderError(
            f"{what}: an empty argument cannot be carried: quadlet drops an empty word and every word after it",
            fix="remove the empty argument from the recipe",
        )
    if value == ";":
        raise RenderError(
            f"{what}: an argument that is exactly ';' cannot be carried: systemd reads it as a command separator",
            fix="drop the ';' argument, or join it to its neighbour (e.g. --opt=;)",
        )
    if _BARE.fullmatch(value):
        return value
    escaped = _double_specials(value.replace("\\", "\\\\").replace('"', '\\"'))
    return f'"{escaped}"'


def words(values: list[str], what: str = "value") -> str:
    return " ".join(word(v, what) for v in values)


def raw(value: str, what: str = "value") -> str:
    """A value for a key quadlet copies verbatim into ExecStart (Volume, PublishPort, Secret, HealthCmd,
    Entrypoint, ...)."""
    _check_common(value, what)
    if value != value.strip():
        raise RenderError(
            f"{what}: {value!r} starts or ends with whitespace, which quadlet trims",
            fix="remove the leading or trailing whitespace",
        )
    if value.endswith("\\"):
        raise RenderError(
            f"{what}: {value!r} ends with a backslash, which a unit file reads as a line continuation",
            fix="remove the trailing backslash",
        )
    return _double_specials(value)


def text(value: str, what: str = "value") -> str:
    """A value for a plain systemd setting that expands specifiers but not variables (Description=)."""
    _check_common(value, what)
    if value.endswith("\\"):
        raise RenderError(
            f"{what}: {value!r} ends with a backslash, which a unit file reads as a line continuation",
            fix="remove the trailing backslash",
        )
    return value.strip().replace("%", "%%")
