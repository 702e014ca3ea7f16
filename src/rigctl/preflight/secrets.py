"""Secrets written in clear into a unit: an environment variable or an engine option whose name says it
holds a credential, with a literal value. Preflight warns about a recipe that would write one
(``check_secrets``), the installer gives a unit that carries one mode 0600 (``unit_secrets``), and
``rigctl doctor`` warns about installed units that carry one (``unit_secrets`` again). The value itself
is never shown: every message names the variable or option with ``***`` for its value.

The rule, on a name (``HF_TOKEN``, ``--api-key``): split it into words at ``_``, ``-`` and ``.``; it
names a secret when its *last* word is one of token, key, keys, secret, secrets, password, passwords,
passwd, passphrase, credential, credentials, or ends in token, secret, password, passwd or apikey
(``HFTOKEN``, ``APIKEY``). So ``HF_TOKEN``, ``VLLM_API_KEY``, ``--api-key``, ``--hf-token``, ``--token``
and ``DB_PASSWORD`` are secrets, and ``KEY_CACHE_DTYPE``, ``--kv-cache-dtype``, ``TOKENIZERS_PARALLELISM``,
``--tokenizer``, ``--max-num-batched-tokens`` (tokens are counts), ``--api-key-file`` and ``HF_TOKEN_PATH``
(a path to the secret, not the secret) are not. A value counts when it is literal: empty, or only a
``$NAME``/``${NAME}`` reference (expanded from the environment at start), is no secret in the file; an
option followed by another option (``--hf-token --port 8000``) has no value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rigctl.host.runargs import exec_words, parse_run
from rigctl.host.unitfile import Entry, MergedUnit, split_words
from rigctl.podman_args import podman_args
from rigctl.preflight.finding import Context, Verdict, ok, warn

if TYPE_CHECKING:
    from rigctl.recipe.model import Recipe

MASK = "***"
_WORDS = frozenset({"token", "key", "keys", "secret", "secrets", "password", "passwords", "passwd", "passphrase",
                    "credential", "credentials"})
_ENDINGS = ("token", "secret", "password", "passwd", "apikey")
_SPLIT = re.compile(r"[_.\-]+")
_REFERENCE = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
_ENV_OPTIONS = ("-e", "--env")

FIX = ("keep it in a podman secret instead: `podman secret create NAME FILE` (or `printf %s VALUE | podman secret "
       "create NAME -`), then name it in the recipe under container.secrets (`- {name: NAME, env: VARIABLE}`) and "
       "drop it from container.env/engine.env; an engine option's value goes the same way through the variable the "
       "engine reads (vLLM: VLLM_API_KEY for --api-key, HF_TOKEN for --hf-token)")


def secret_name(name: str) -> bool:
    """Whether an environment variable or option name says it holds a secret (the module's rule)."""
    words = [w for w in _SPLIT.split(name.lower()) if w]
    if not words:
        return False
    last = words[-1]
    return last in _WORDS or last.endswith(_ENDINGS)


def literal(value: str | None) -> bool:
    """Whether a value is written out in the file (not empty, not only a $VARIABLE reference)."""
    return bool(value) and not _REFERENCE.match(value or "")


@dataclass(frozen=True)
class Exposed:
    """One secret-looking value: where it is written and how it is spelled, its value masked."""

    where: str  # "container.env", "engine.args", "Environment=", "Exec=", ...
    shown: str  # "HF_TOKEN=***", "--api-key ***"
    entry: Entry | None = None  # in a unit file: the assignment that holds it

    def __str__(self) -> str:
        return f"{self.where} {self.shown}"


def env_secrets(env: Mapping[str, str] | Iterable[tuple[str, str]]) -> list[str]:
    """``NAME=***`` for each secret-looking variable with a literal value."""
    pairs = env.items() if isinstance(env, Mapping) else env
    return [f"{name}={MASK}" for name, value in pairs if secret_name(name) and literal(value)]


def assignment_secrets(words: Iterable[str]) -> list[str]:
    """Of ``NAME=VALUE`` words (Environment=, ``-e``), ``NAME=***`` for each that is a secret."""
    return env_secrets([tuple(w.split("=", 1)) for w in words if "=" in w])  # type: ignore[misc]


def option_secrets(words: Sequence[str]) -> list[str]:
    """Of a command line, ``--option ***`` / ``--option=***`` for each secret-looking option with a value."""
    found: list[str] = []
    for i, word in enumerate(words):
        if not word.startswith("-") or word in ("-", "--"):
            continue
        name, eq, value = word.partition("=")
        if not secret_name(name.lstrip("-")):
            continue
        if eq:
            if literal(value):
                found.append(f"{name}={MASK}")
        elif i + 1 < len(words) and not words[i + 1].startswith("-") and literal(words[i + 1]):
            found.append(f"{name} {MASK}")
    return found


# --- a recipe (preflight) -----------------------------------------------------------------------------


def recipe_secrets(recipe: Recipe) -> list[Exposed]:
    """What of a recipe would be written into its unit and looks like a secret."""
    c, e = recipe.container, recipe.engine
    found = [Exposed("container.env", s) for s in env_secrets(c.env)]
    found += [Exposed("engine.env", s) for s in env_secrets(e.env)]
    found += [Exposed("engine.command", s) for s in option_secrets(e.command)]
    found += [Exposed("engine.args", s) for s in option_secrets(e.args)]
    extra = podman_args(list(c.extra_podman_args))  # its -e NAME=VALUE; podman's own options are not secrets
    found += [Exposed("container.extra_podman_args", s) for s in assignment_secrets(extra.values(*_ENV_OPTIONS))]
    return found


def check_secrets(ctx: Context) -> Verdict:
    """A value that looks like a credential (a variable or option named *TOKEN, *KEY, *SECRET, *PASSWORD,
    --api-key, --hf-token, --token) would be written in clear into the unit file, where `systemctl show` and
    `podman inspect` show it to anyone who may run them; a podman secret keeps it out of the unit."""
    found = recipe_secrets(ctx.recipe)
    if not found:
        return ok("no secret-looking value in the unit's environment or engine arguments")
    return warn(clear_message(found), FIX)


def clear_message(found: Sequence[Exposed]) -> str:
    return (f"{'; '.join(map(str, found))}: written in clear into the unit file (rigctl installs it 0600, but "
            "`systemctl show` and `podman inspect` still show it to whoever may run them)")


# --- a unit file (the installer, doctor) --------------------------------------------------------------


def _entry_env(entries: Iterable[Entry], where: str) -> list[Exposed]:
    return [Exposed(where, s, e) for e in entries for s in assignment_secrets(split_words(e.value))]


def _entry_options(entries: Iterable[Entry], where: str) -> list[Exposed]:
    return [Exposed(where, s, e) for e in entries for s in option_secrets(split_words(e.value))]


def unit_secrets(merged: MergedUnit) -> list[Exposed]:
    """Every secret-looking literal value in a unit (with its drop-ins): in Environment=, the container's
    Exec= and PodmanArgs= (``-e NAME=VALUE`` and options), a service's ExecStart= (``podman run``'s
    ``-e`` and the command's options). EnvironmentFile= and Secret= keep values out of the unit: fine."""
    found: list[Exposed] = []
    for section in ("Container", "Service"):
        found += _entry_env(merged.all(section, "Environment"), "Environment=")
    found += _entry_options(merged.all("Container", "Exec"), "Exec=")
    for entry in merged.all("Container", "PodmanArgs"):
        args = podman_args(split_words(entry.value))
        # podman's own options are not looked at by name: --secret is the right way, --passwd a switch
        found += [Exposed("PodmanArgs=", s, entry) for s in assignment_secrets(args.values(*_ENV_OPTIONS))]
    for entry in merged.all("Service", "ExecStart"):
        words = exec_words(entry.value)
        run = parse_run(words)
        if run is None:
            found += [Exposed("ExecStart=", s, entry) for s in option_secrets(words)]
            continue
        found += [Exposed("ExecStart=", s, entry) for s in assignment_secrets(run.values(*_ENV_OPTIONS))]
        found += [Exposed("ExecStart=", s, entry) for s in option_secrets(run.command)]
    return found
