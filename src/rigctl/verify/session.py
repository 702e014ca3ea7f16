"""State one verify run shares between its checks: the engine, every output seen (the repetition check
reads them all), what the server told about itself (its dialect and the context one request may hold), and
whether it has stopped answering."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rigctl.recipe.defaults import MAX_CONTEXT
from rigctl.verify.client import Completion, EngineAPI, EngineRequestError, Request, listed_entry
from rigctl.verify.dialects import OPENAI, ContextLimit, Dialect, detect, dialect_named
from rigctl.verify.prompts import Sized, size_prompt
from rigctl.verify.report import Expectations, NullProgress, RunProgress


@dataclass
class Output:
    source: str  # e.g. "smoke[0]", "soak[12]"
    text: str
    request: Request | None = None  # what was asked (`verify --export` keeps the answers of fixed requests)


@dataclass
class Session:
    engine: EngineAPI
    expect: Expectations
    progress: RunProgress = field(default_factory=NullProgress)
    outputs: list[Output] = field(default_factory=list)
    blocker: str | None = None  # set once the engine is unreachable or hung; later checks skip
    foreign: str | None = None  # set when the URL serves no OpenAI API at all (a web server): nothing runs
    # What ``learn`` found out about the server:
    dialect: Dialect = OPENAI
    detection: str = "not yet"  # "named", "detected", or why it is plain OpenAI
    mismatch: str | None = None  # the engine expected (recipe, --engine) when another one answers
    limit: ContextLimit | None = None  # the context one request may hold, as the engine reports it
    unbelieved: int | None = None  # a context figure too large to be true (not used for sizing)
    context_problem: str | None = None  # why the figure of the dialect that answered could not be read
    tokenizer_doubt: str | None = None  # why the engine's tokenizer is no longer used, once it counted wrong
    learnt: bool = False

    @property
    def server_context(self) -> int | None:
        return self.limit.tokens if self.limit is not None else None

    @property
    def context(self) -> int | None:
        """The context to test: the expected one, never more than the engine serves per request (a longer
        prompt would only be refused); the engine's own when nothing is expected."""
        if self.server_context is not None and self.expect.context is not None:
            return min(self.server_context, self.expect.context)
        return self.server_context if self.server_context is not None else self.expect.context

    def figures(self) -> dict[str, Any]:
        """What every check's figures carry: the dialect spoken and the context known (nothing before
        ``learn``: a run of health alone spoke no dialect, nor one at a URL without an OpenAI API)."""
        if not self.learnt or self.foreign is not None:
            return {}
        return {"dialect": self.dialect.name, "context": self.context,
                "context_source": self.limit.describe() if self.limit is not None else None}

    def engine_info(self) -> dict[str, Any]:
        """The report's account of the engine: which dialect, how it was found, what it serves per request
        (nothing when no engine was found to account for)."""
        if not self.learnt or self.foreign is not None:
            return {}
        info: dict[str, Any] = {
            "dialect": self.dialect.name, "detection": self.detection, "expected": self.expect.engine,
            "tokenizer": self.dialect.tokenizer, "served_context": self.server_context,
            "context_source": self.limit.describe() if self.limit is not None else None,
            "expected_context": self.expect.context, "context": self.context,
        }
        if self.limit is not None and self.limit.slots is not None:
            info.update({"slots": self.limit.slots, "total_context": self.limit.total})
        if self.tokenizer_doubt is not None:
            info["tokenizer_doubt"] = self.tokenizer_doubt
        return info

    async def learn(self) -> None:
        """Find out once which engine answers and how long one request may be. A probe that fails or times out
        leaves plain OpenAI; the checks that follow find out about a dead engine on their own."""
        if self.learnt:
            return
        self.learnt = True
        timeout = self.expect.health_timeout_s
        expected = self.expect.engine
        entry: dict[str, Any] | None = None
        try:
            entries = await self.engine.models(timeout=timeout)
            entry = listed_entry(entries, self.engine.endpoint.model)
            if entry is None and len(entries) == 1:
                entry = entries[0]  # one model served under another name: its engine still speaks the same
        except EngineRequestError as err:
            if err.kind == "not-openai":  # no engine to learn about; the runner says so and stops
                self.foreign = err.message
                return
        try:
            found = await detect(self.engine, entry, timeout=timeout, expected=expected)
            self.dialect, self.detection = found.dialect, found.how
            if expected is not None and found.dialect.name != expected:
                if found.dialect is OPENAI:
                    # None of the engines answered: trust what the operator named, guarded as any tokenizer is.
                    self.dialect = dialect_named(expected)
                    self.detection = f"named (its own endpoints did not answer: {found.how})"
                else:
                    self.mismatch = expected
        except EngineRequestError as err:
            self.detection = f"not detected ({err.message})"
            return
        try:
            limit = await self.dialect.context(self.engine, entry, timeout=timeout)
        except EngineRequestError as err:
            self.context_problem = err.message  # the models check's finding
            return
        if limit is not None and limit.tokens > MAX_CONTEXT:
            # Believed, it would size the needle prompt: a hostile figure must not make verify build gigabytes.
            self.unbelieved = limit.tokens
        else:
            self.limit = limit

    async def count(self, text: str) -> int | None:
        """The engine's own token count, through its dialect; None once it has counted impossibly."""
        if self.tokenizer_doubt is not None:
            return None
        return await self.dialect.count(self.engine, text, timeout=self.expect.request_timeout_s)

    async def size(self, build: Callable[[int, int], str], target: int, *, margin: float) -> Sized:
        sized = await size_prompt(self.engine, build, target, timeout=self.expect.request_timeout_s, margin=margin,
                                  count=self.count)
        if sized.note is not None:
            self.tokenizer_doubt = sized.note
        return sized

    def sizing_figures(self, sized: Sized) -> dict[str, Any]:
        figures: dict[str, Any] = {"sizing": sized.method, "tokenizer": self.dialect.tokenizer}
        note = sized.note or (self.tokenizer_doubt if sized.method != "tokenize" else None)
        if note:
            figures["sizing_note"] = note
        return figures

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
        self.outputs.append(Output(source, done.text, None if done.clipped else request))
        return done
