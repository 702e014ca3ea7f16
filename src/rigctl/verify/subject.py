"""What `rigctl verify` checks: one endpoint and the expectations it must meet, from a recipe (and where
that recipe is deployed) or from --url and --model alone, with the command line's overrides applied on
top. Kept apart from the command so that the precedence (flag over record over recipe) is read in one
place and tested without a server."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from rigctl.errors import UsageError
from rigctl.recipe.model import Recipe
from rigctl.verify.client import Endpoint
from rigctl.verify.report import Expectations, endpoint_for, health_timeout


@dataclass(frozen=True)
class Overrides:
    """The command line's say: each None leaves the recipe's (or the default) value."""

    url: str | None = None
    model: str | None = None
    api_key: str | None = None
    context: int | None = None
    engine: str | None = None  # a dialect name, any case
    timeout: float | None = None  # seconds per request
    concurrency: int | None = None  # soak streams at once
    requests: int | None = None  # soak requests in all

    def __post_init__(self) -> None:
        if self.timeout is not None and not math.isfinite(self.timeout):  # nan and inf pass typer's min=1
            raise UsageError(f"--timeout {self.timeout}: give a finite number of seconds")

    @property
    def dialect(self) -> str | None:
        return self.engine.strip().lower() if self.engine is not None else None


def for_recipe(recipe: Recipe, deployed: Endpoint | None, given: Overrides) -> tuple[Endpoint, Expectations]:
    """The recipe's expectations; its endpoint where it is deployed (``deployed``, from rigctl's record),
    else where the recipe publishes it; --url and --model over either."""
    endpoint = deployed or endpoint_for(recipe, api_key=given.api_key)
    if given.url or given.model:
        endpoint = Endpoint(given.url or endpoint.base_url, given.model or endpoint.model, api_key=given.api_key,
                            health_path=endpoint.health_path)
    expect = Expectations.from_recipe(recipe)
    if given.context is not None:
        expect = dataclasses.replace(expect, context=given.context)
    if given.dialect is not None:
        expect = dataclasses.replace(expect, engine=given.dialect)
    return endpoint, _tuned(expect, given)


def for_url(given: Overrides) -> tuple[Endpoint, Expectations]:
    """No recipe: --url and --model say everything, the expectations are the defaults."""
    if not given.url or not given.model:
        raise UsageError("give a RECIPE, or both --url and --model",
                         fix="rigctl verify --url http://127.0.0.1:8000 --model NAME")
    endpoint = Endpoint(given.url, given.model, api_key=given.api_key)
    return endpoint, _tuned(Expectations(context=given.context, engine=given.dialect), given)


def _tuned(expect: Expectations, given: Overrides) -> Expectations:
    if given.timeout is not None:
        expect = dataclasses.replace(expect, request_timeout_s=given.timeout,
                                     health_timeout_s=health_timeout(given.timeout))
    if given.concurrency is not None or given.requests is not None:
        soak = expect.soak.model_copy(update={
            k: v for k, v in (("concurrency", given.concurrency), ("requests", given.requests)) if v is not None})
        expect = dataclasses.replace(expect, soak=soak)
    return expect
