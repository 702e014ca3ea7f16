"""HTTP readiness of an engine: ``GET /health`` then ``GET /v1/models``. vLLM answers /v1/models before
warmup ends, so health alone or models alone is not readiness; both must agree.

The HTTP is verify's engine adapter (``rigctl.verify.client.HttpEngine``): the same bounded body reader, the
same Content-Encoding rule and the same reading of a model list as every check of verify. The probe is sync
for deploy's loops, so it runs that adapter on an event loop of its own, which lives as long as the probe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import asyncio

    from rigctl.verify.client import HttpEngine


@dataclass(frozen=True)
class Readiness:
    health_status: int | None  # None: no answer (refused, timeout)
    models: list[str]
    max_model_len: int | None
    detail: str

    def ready_for(self, served_name: str) -> bool:
        return self.health_status == 200 and served_name in self.models


class Probe(Protocol):
    def check(self, base_url: str, health_path: str, served_name: str) -> Readiness: ...
    def close(self) -> None: ...


DETAIL_LIMIT = 300  # a readiness detail is one line of a wait's report
KEPT_ENGINES = 8  # engines (base URL, health path, name) whose connections the probe keeps open


class HttpProbe:
    """Readiness through ``HttpEngine``; each request bounded by ``timeout`` seconds as a whole."""

    def __init__(self, timeout: float = 1.0) -> None:
        # asyncio, HTTP and verify load only for a probe: `status` with nothing deployed never needs them
        import asyncio  # noqa: PLC0415

        self._timeout = timeout
        self._runner: asyncio.Runner = asyncio.Runner()
        self._engines: dict[tuple[str, str, str], HttpEngine] = {}

    def check(self, base_url: str, health_path: str, served_name: str) -> Readiness:
        return self._runner.run(self._check(base_url, health_path, served_name))

    async def _check(self, base_url: str, health_path: str, served_name: str) -> Readiness:
        from rigctl.errors import UsageError  # noqa: PLC0415 - see __init__
        from rigctl.verify.client import EngineRequestError, listed_context, listed_entry, listed_ids  # noqa: PLC0415

        try:
            engine = await self._engine(base_url, health_path, served_name)
        except UsageError as exc:  # an endpoint no request can go to
            return Readiness(None, [], None, exc.message[:DETAIL_LIMIT])
        try:
            health = await engine.get(health_path, timeout=self._timeout)
        except EngineRequestError as err:
            return Readiness(None, [], None, err.message[:DETAIL_LIMIT])
        if health.status != 200:
            return Readiness(health.status, [], None, f"{health_path} answered {health.status}"[:DETAIL_LIMIT])
        try:
            entries = await engine.models(timeout=self._timeout)
        except EngineRequestError as err:  # a cap, a foreign server, a list that is no list: a plain sentence
            return Readiness(200, [], None, err.message[:DETAIL_LIMIT])
        ids = listed_ids(entries)
        max_len = listed_context(listed_entry(entries, served_name))
        shown = ids[:20] + ([f"... {len(ids) - 20} more"] if len(ids) > 20 else [])
        return Readiness(200, ids, max_len, "ready" if served_name in ids else f"models: {shown}"[:DETAIL_LIMIT])

    async def _engine(self, base_url: str, health_path: str, served_name: str) -> HttpEngine:
        from rigctl.verify.client import Endpoint, HttpEngine  # noqa: PLC0415 - see __init__

        key = (base_url, health_path, served_name)
        engine = self._engines.get(key)
        if engine is None:
            if len(self._engines) >= KEPT_ENGINES:
                await self._engines.pop(next(iter(self._engines))).aclose()
            # no proxy of the environment between deploy and its own engine
            engine = HttpEngine(Endpoint(base_url, served_name, health_path=health_path), max_connections=1,
                                trust_env=False)
            self._engines[key] = engine
        return engine

    async def _close_engines(self) -> None:
        engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            await engine.aclose()

    def close(self) -> None:
        if self._engines:
            self._runner.run(self._close_engines())
        self._runner.close()
