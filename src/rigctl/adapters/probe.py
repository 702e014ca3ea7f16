"""HTTP readiness of an engine: ``GET /health`` then ``GET /v1/models``. vLLM answers /v1/models before
warmup ends, so health alone or models alone is not readiness; both must agree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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


class HttpProbe:
    """The engine is an HTTP server rigctl did not write: every answer is read up to a cap, uncompressed."""

    def __init__(self, timeout: float = 1.0) -> None:
        # HTTP and verify load only for a probe: `status` with nothing deployed never needs them
        import httpx  # noqa: PLC0415

        from rigctl.verify.client import API_LIMIT  # noqa: PLC0415

        self.LIMIT = API_LIMIT
        self._client = httpx.Client(timeout=timeout, trust_env=False, headers={"Accept-Encoding": "identity"})

    def _get(self, url: str) -> tuple[int, bytes]:
        """Status and body, the body read raw up to LIMIT (a larger or compressed one is an error)."""
        with self._client.stream("GET", url) as resp:
            if resp.headers.get("content-encoding", "identity").lower() != "identity":
                raise ValueError("a compressed answer, though identity was asked for")
            body = bytearray()
            for chunk in resp.iter_raw():
                body += chunk
                if len(body) > self.LIMIT:
                    raise ValueError(f"an answer larger than {self.LIMIT // (1 << 20)} MiB")
            return resp.status_code, bytes(body)

    def check(self, base_url: str, health_path: str, served_name: str) -> Readiness:
        import httpx  # noqa: PLC0415 - loaded by __init__ already

        from rigctl.verify.enginejson import EngineJSONError, as_count, parse  # noqa: PLC0415 - likewise

        try:
            status, _ = self._get(base_url + health_path)
        except (httpx.HTTPError, ValueError) as exc:
            return Readiness(None, [], None, f"{health_path}: {type(exc).__name__}: {exc}"[:300])
        if status != 200:
            return Readiness(status, [], None, f"{health_path} answered {status}")
        try:
            status, body = self._get(base_url + "/v1/models")
        except (httpx.HTTPError, ValueError) as exc:
            return Readiness(200, [], None, f"/v1/models: {type(exc).__name__}: {exc}"[:300])
        try:
            document = parse(body, "the answer") if status == 200 else {}
        except EngineJSONError as exc:  # a plain sentence: nested too deep, not JSON
            return Readiness(200, [], None, f"/v1/models: {exc}"[:300])
        data = document.get("data", []) if isinstance(document, dict) else None
        if not isinstance(data, list):
            return Readiness(200, [], None, '/v1/models: not an OpenAI model list (no "data" list)')
        ids = [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
        max_len = next(
            (as_count(m["max_model_len"]) for m in data
             if isinstance(m, dict) and m.get("id") == served_name and isinstance(m.get("max_model_len"), int)),
            None,
        )
        shown = ids[:20] + ([f"... {len(ids) - 20} more"] if len(ids) > 20 else [])
        return Readiness(200, ids, max_len, "ready" if served_name in ids else f"models: {shown}"[:300])

    def close(self) -> None:
        self._client.close()
