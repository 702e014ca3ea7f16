"""The known-bad table: combinations of model family, attention backend, compute capability, engine (kind and
version range) and NCCL known to break, as data (``known_bad.yaml`` beside this module), extended by each
recipe's own ``known_issues.bad_combinations``. ``match`` judges one row against a recipe and what the host and
image say; the ``known-bad`` check (``stack_checks.check_known_bad``) reports the rows that hold.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from rigctl.host.facts import leading_version
from rigctl.recipe.model import KnownBad, Recipe

TABLE = Path(__file__).with_name("known_bad.yaml")

Id = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]*$", max_length=80)]


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Id
    families: list[str] | None = None
    checkpoint_formats: list[str] | None = None
    attention_backends: list[str | None] | None = Field(default=None, description="null: the engine's default")
    compute_capabilities: list[str] | None = None
    engine_kinds: list[str] | None = None
    engine_from: str | None = Field(default=None, description="the first engine version that has the problem")
    engine_below: str | None = Field(default=None, description="the first engine version known to be fixed")
    nccl_versions: list[str] | None = Field(default=None, description="NCCL releases that have it, e.g. 2.26.2")
    min_tensor_parallel: int | None = Field(default=None, ge=1)
    unless_args: list[str] = Field(default_factory=list, description="an engine argument that avoids it")
    severity: Literal["warn", "fail"] = "fail"
    problem: str
    error: str | None = Field(default=None, description="what the failure prints, to search a log for")
    fix: str
    source: str | None = None  # where it was reported
    origin: Literal["rigctl", "recipe"] = "rigctl"

    @classmethod
    def from_recipe(cls, bad: KnownBad) -> Row:
        """A recipe's own known-bad combination as a row of the table (its columns are a subset)."""
        return cls(id=bad.id, checkpoint_formats=None if bad.checkpoint_formats is None else
                   [str(f) for f in bad.checkpoint_formats],
                   engine_kinds=None if bad.engine_kinds is None else [str(k) for k in bad.engine_kinds],
                   attention_backends=bad.attention_backends, compute_capabilities=bad.compute_capabilities,
                   problem=bad.problem, fix=bad.remedy, origin="recipe")


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: list[Row]


@functools.cache
def bundled() -> tuple[Row, ...]:
    """The table rigctl ships (read once)."""
    return tuple(Table.model_validate(yaml.safe_load(TABLE.read_text(encoding="utf-8"))).rows)


def rows_for(recipe: Recipe) -> list[Row]:
    """The bundled rows, then the recipe's own."""
    return [*bundled(), *(Row.from_recipe(b) for b in recipe.known_issues.bad_combinations)]


@dataclass(frozen=True)
class Judged:
    row: Row
    holds: bool | None  # None: a value the row needs is unknown here (and the row is not assumed to hold)
    why: str  # what made it hold, or what was unknown


def _version(text: str | None) -> tuple[int, ...] | None:
    return leading_version(text, 4)


def match(row: Row, recipe: Recipe, host_ccs: set[str | None], nccl: str | None) -> Judged:
    """Whether ``row`` holds for ``recipe`` on GPUs of ``host_ccs`` with the image's ``nccl``. An unknown
    compute capability is assumed to match (the recipe's rows always failed closed); an unknown NCCL or engine
    version is not, and says so."""
    engine = recipe.engine
    said: list[str] = []
    recipe_side = (
        (row.families, recipe.family),
        (row.checkpoint_formats, str(recipe.checkpoint.format)),
        (row.engine_kinds, str(engine.kind)),
    )
    if any(wanted is not None and have not in wanted for wanted, have in recipe_side):
        return Judged(row, False, "")
    if row.attention_backends is not None and recipe.attention_backend not in row.attention_backends:
        return Judged(row, False, "")
    if row.min_tensor_parallel is not None:
        if recipe.gpus.tensor_parallel < row.min_tensor_parallel:
            return Judged(row, False, "")
        said.append(f"TP{recipe.gpus.tensor_parallel}")
    if any(arg in engine.args or any(a.startswith(arg + "=") for a in engine.args) for arg in row.unless_args):
        return Judged(row, False, "")
    if row.engine_from is not None or row.engine_below is not None:
        have = _version(engine.version)
        if have is None:
            return Judged(row, None, "engine.version unset")
        low, high = _version(row.engine_from), _version(row.engine_below)
        if (low is not None and have < low) or (high is not None and have >= high):
            return Judged(row, False, "")
        said.append(f"{engine.kind} {engine.version}")
    if row.nccl_versions is not None:
        if nccl is None:
            return Judged(row, None, "the image declares no NCCL version")
        if not any(nccl == v or nccl.startswith(v + ".") for v in row.nccl_versions):
            return Judged(row, False, "")
        said.append(f"NCCL {nccl}")
    if row.compute_capabilities is not None:
        known = {c for c in host_ccs if c}
        if not known or None in host_ccs:
            said.append("compute capability unknown here, assumed to match")  # fail closed
        elif known & set(row.compute_capabilities):
            said.append("sm_" + "/".join(sorted(c.replace(".", "") for c in known)))
        else:
            return Judged(row, False, "")
    return Judged(row, True, ", ".join(said) or "recipe")
