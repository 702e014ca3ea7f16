"""Crash signatures: a recipe's ``known_issues.signatures`` matched against engine output (logs, stderr,
an error body). Shared by verify and by deploy/logs, which import it from here.

The story's engine died with ``ValueError: ReplaySSM prefill source/state row count mismatch`` and the API
server then exited 0; the only durable evidence of what happened is that line in the log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rigctl.recipe.model import CrashSignature


@dataclass(frozen=True)
class SignatureMatch:
    id: str
    line_number: int  # 1-based line in the text searched
    line: str
    meaning: str
    remedy: str
    link: str | None


def match_signatures(
    signatures: Sequence[CrashSignature], text: str | Iterable[str], *, first_only: bool = False
) -> list[SignatureMatch]:
    """Every line of ``text`` (a string or an iterable of lines) that a signature's pattern matches,
    in line order. With ``first_only`` each signature is reported at its first match only."""
    compiled = [(sig, re.compile(sig.pattern)) for sig in signatures]
    lines = text.splitlines() if isinstance(text, str) else text
    seen: set[str] = set()
    found: list[SignatureMatch] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        for sig, pattern in compiled:
            if first_only and sig.id in seen:
                continue
            if pattern.search(line):
                seen.add(sig.id)
                found.append(SignatureMatch(sig.id, number, line.strip(), sig.meaning, sig.remedy, sig.link))
    return found
