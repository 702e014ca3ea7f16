"""`rigctl logs`: the engine's output from podman (and the journal where there is one), plus the output of
the last failed warmup that rigctl kept, each line checked against the recipe's crash signatures."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rigctl.deploy.ports import Podman, Scope, journal_available, journal_lines
from rigctl.deploy.state import DeploymentRecord
from rigctl.recipe.model import CrashSignature
from rigctl.verify.signatures import SignatureMatch, match_signatures


@dataclass(frozen=True)
class LogLine:
    source: str  # podman | journal | last-failure
    text: str
    signature: SignatureMatch | None = None

    def to_dict(self) -> dict[str, object]:
        return {"source": self.source, "text": self.text,
                "signature": None if self.signature is None else self.signature.to_dict()}


def _mark(source: str, lines: Sequence[str], signatures: Sequence[CrashSignature]) -> list[LogLine]:
    hits = {m.line_number: m for m in match_signatures(signatures, lines)}
    return [LogLine(source, line, hits.get(i)) for i, line in enumerate(lines, start=1)]


def collect(
    *, container: str, unit: str, scope: Scope, podman: Podman, signatures: Sequence[CrashSignature],
    record: DeploymentRecord | None, since: str | None, tail: int | None,
) -> list[LogLine]:
    out: list[LogLine] = []
    if record is not None and record.last_failure and since is None:
        out += _mark("last-failure", list(record.last_failure.get("last_lines", [])), signatures)
    lines = podman.logs(container, tail=tail, since=since)
    if not lines and journal_available():
        # The container is gone (quadlet runs it with --rm): its output may survive in the journal.
        lines = journal_lines(unit, scope, since=since, tail=tail)
        out += _mark("journal", lines, signatures)
    else:
        out += _mark("podman", lines, signatures)
    return out


def follow(
    *, container: str, podman: Podman, signatures: Sequence[CrashSignature]
) -> Iterator[LogLine]:
    stream = podman.follow(container)
    try:
        for line in stream:
            hit = match_signatures(signatures, [line])
            yield LogLine("podman", line, hit[0] if hit else None)
    finally:
        stream.close()
