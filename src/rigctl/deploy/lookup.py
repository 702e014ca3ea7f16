"""What `verify`, `logs`, `down` and `swap` mean by their NAME argument: a deployment's name, or the name or
path of the recipe it was made from. One answer for all four: its scope and record by the one scope rule
(``state.locate``), and the recipe it came from.

A path names a recipe file: that file is the recipe, and its deployment is found by the name inside it. A
name names a deployment first: the recipe is the one its record says it was deployed from (so `verify
NAME` knows a deployment made from a file elsewhere), else the catalog's recipe of that name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rigctl.deploy.state import DeploymentRecord, deployed_recipe, is_record_name, locate, not_deployed, search_scopes
from rigctl.errors import InvalidInputError, RecipeNotFoundError
from rigctl.places import Dirs, Scope, container_service
from rigctl.recipe.load import load
from rigctl.recipe.model import CrashSignature, Recipe
from rigctl.recipe.names import default_container

if TYPE_CHECKING:
    from rigctl.verify.client import Endpoint


@dataclass(frozen=True)
class FoundDeployment:
    """The deployment a command acts on. ``record`` is None when rigctl has no record of it (a recipe
    that is not deployed, or deployed by other means); ``recipe`` is None when no recipe of it loads any
    more (the record still names its unit, container and endpoint), and ``recipe_error`` says why."""

    name: str
    scope: Scope
    record: DeploymentRecord | None
    recipe: Recipe | None
    recipe_error: InvalidInputError | None = None
    # what a reader must know of the recipe used: its file is gone or changed since it was deployed (the
    # record's copy is used), or that copy no longer validates (the file is used)
    recipe_note: str | None = None

    @property
    def dirs(self) -> Dirs:
        return Dirs.of(self.scope)

    @property
    def container(self) -> str:
        if self.record is not None:
            return self.record.container
        return self.recipe.container_name if self.recipe is not None else default_container(self.name)

    @property
    def unit(self) -> str:
        return self.record.unit if self.record is not None else container_service(self.container)

    @property
    def signatures(self) -> tuple[CrashSignature, ...]:
        return tuple(self.recipe.known_issues.signatures) if self.recipe is not None else ()

    def need_recipe(self) -> Recipe:
        """The recipe, for a command that cannot work without it (verify's expectations)."""
        if self.recipe is None:
            raise self.recipe_error or InvalidInputError([f"{self.name}: no recipe of this deployment loads"])
        return self.recipe

    def endpoint(self, api_key: str | None) -> Endpoint | None:
        """Where the deployment answers, as `up` recorded it (with the --set and overlays it was deployed
        with, which the recipe file may not carry); None without a record."""
        if self.record is None:
            return None
        from rigctl.verify.client import Endpoint  # noqa: PLC0415 - the HTTP client loads for verify only

        return Endpoint(self.record.endpoint, self.record.served_name, api_key=api_key,
                        health_path=self.record.health_path)


def find_deployment(
    name_or_path: str, choice: Scope | None, *, overlays: Sequence[str] = (), sets: Sequence[str] = (),
    must_exist: bool = True,
) -> FoundDeployment:
    """The deployment ``name_or_path`` means, looked for in ``search_scopes(choice)``.

    Not deployed there: the recipe of that name or path, as a deployment without a record (what it would be
    called, where it would answer). Neither a deployment nor a recipe: ``DeploymentNotFoundError``, unless
    ``must_exist`` is False: then a deployment of that bare name, whose caller decides (`down` is done when
    there is nothing to stop; `swap` refuses with the recipe's error or "not deployed"). Deployed only in
    a scope that was not searched: always that error (``state.locate``)."""
    found = locate(name_or_path, choice)
    note: str | None = None
    kept = None
    if found is not None and is_record_name(name_or_path) and not overlays and not sets:
        kept, note = deployed_recipe(found[0])  # the recipe as deployed, whatever became of its file
    if kept is not None:
        recipe, error = kept, None
    else:
        recipe, error = _recipe(name_or_path, found[0] if found else None, overlays=overlays, sets=sets)
    if found is None and recipe is not None:
        found = locate(recipe.name, choice)
    searched = search_scopes(choice)
    if found is not None:
        record, scope = found
        return FoundDeployment(record.recipe, scope, record, recipe, error, note)
    if recipe is not None:
        return FoundDeployment(recipe.name, searched[0], None, recipe)
    if not must_exist:
        return FoundDeployment(name_or_path, searched[0], None, None, error)
    if error is not None and not isinstance(error, RecipeNotFoundError):
        raise error  # a recipe file that is there but does not load: say why, not "not deployed"
    raise not_deployed(name_or_path, searched, recipe_too=True)


def _recipe(
    name_or_path: str, record: DeploymentRecord | None, *, overlays: Sequence[str], sets: Sequence[str],
) -> tuple[Recipe | None, InvalidInputError | None]:
    """The recipe and, when none loads, the first reason: for a path, that file; for a name, the file the
    record says the deployment came from, then the catalog's recipe of that name."""
    candidates = [name_or_path]
    if is_record_name(name_or_path) and record is not None and record.recipe_source:
        candidates.insert(0, record.recipe_source)
    first: InvalidInputError | None = None
    for candidate in candidates:
        try:
            return load(candidate, overlays=overlays, sets=sets).recipe, None
        except InvalidInputError as exc:
            first = first or exc
    return None, first
