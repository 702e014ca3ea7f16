"""State one verify run shares between its checks: the engine, every output seen (the repetition check
reads them all), what the server told about itself, and whether it has stopped answering."""

from __future__ import annotations

from dataclasses import dataclass, field

from rigctl.verify.client import Completion, EngineAPI, EngineRequestError, Request
from rigctl.verify.report import Expectations, NullProgress, Progress


@dataclass
class Output:
    source: str  # e.g. "smoke[0]", "soak[12]"
    text: str


@dataclass
class Session:
    engine: EngineAPI
    expect: Expectations
    progress: Progress = field(default_factory=NullProgress)
    outputs: list[Output] = field(default_factory=list)
    server_context: int | None = None  # max_model_len from /v1/models, when the server gives it
    blocker: str | None = None  # set once the engine is unreachable or hung; later checks skip

    async def complete(self, source: str, request: Request, *, timeout: float | None = None,
                       idle_timeout: float | None = None) -> Completion:
        """A request whose output is recorded; a timeout or refused connection marks the engine blocked,
        so that one hung engine costs one timeout, not one per check."""
        try:
            done = await self.engine.complete(
                request, timeout=timeout or self.expect.request_timeout_s, idle_timeout=idle_timeout
            )
        except EngineRequestError as err:
            if err.kind in ("timeout", "connect"):
                self.blocker = f"{source}: {err.message}"
            raise
        self.outputs.append(Output(source, done.text))
        return done

    @property
    def context(self) -> int | None:
        """The context to test: the server's own max_model_len when it reports one (a longer expectation
        would only be refused), else the expected one."""
        if self.server_context is not None:
            return self.server_context
        return self.expect.context
