"""What changes with the podman (and quadlet) version: keys, their PodmanArgs equivalents, refusals."""

from __future__ import annotations

import re

import pytest
from tests.support.recipes import recipe_with

from rigctl.plan.plan import parse_version
from rigctl.podman_versions import QUADLET_KEYS
from rigctl.render.escape import RenderError
from rigctl.render.units import render_units

_recipe = recipe_with


def _container_keys(text: str) -> list[str]:
    section = text.split("[Container]\n", 1)[1].split("\n[", 1)[0]
    return [line.split("=", 1)[0] for line in section.splitlines() if line and not line.startswith("#")]


def _values(text: str, key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", text, re.M)


def test_podman_4_3_alone_is_refused_with_a_fix() -> None:
    with pytest.raises(RenderError, match="no quadlet generator") as err:
        render_units(_recipe(), podman_version=(4, 3))
    assert err.value.fix is not None and "--quadlet-version" in err.value.fix


def test_podman_older_than_4_3_is_refused() -> None:
    with pytest.raises(RenderError, match="too old"):
        render_units(_recipe(), podman_version=(4, 2), quadlet_version=(5, 4))


def test_podman_4_3_with_quadlet_5_4() -> None:
    rendered = render_units(_recipe("qwen3-8b-vllm"), podman_version=(4, 3), quadlet_version=(5, 4))
    text = rendered.files[0].text
    assert "Notify=healthy" not in text  # 4.3 rejects --sdnotify=healthy
    assert _values(text, "ShmSize") == ["8g"]  # a quadlet 5.4 key; it becomes --shm-size, which 4.3 has
    assert _values(text, "StopTimeout") == ["120"]
    assert _values(text, "ExecStartPre") == ["-/bin/rm -f %t/%N.cid"]  # 4.3 leaves a stale cid file
    kinds = {n.kind for n in rendered.notes}
    assert "adapted" in kinds
    assert any("Notify=healthy" in n.message for n in rendered.notes)


@pytest.mark.parametrize(("version", "expected"), [
    ((4, 4), {"health": False, "secret": False, "shm": False, "stop": False, "notify": False}),
    ((4, 6), {"health": True, "secret": True, "shm": False, "stop": False, "notify": False}),
    ((4, 7), {"health": True, "secret": True, "shm": True, "stop": False, "notify": False}),
    ((5, 0), {"health": True, "secret": True, "shm": True, "stop": True, "notify": True}),
    ((5, 4), {"health": True, "secret": True, "shm": True, "stop": True, "notify": True}),
])
def test_keys_or_podman_args_by_version(version: tuple[int, int], expected: dict[str, bool]) -> None:
    recipe = _recipe("qwen3-8b-vllm", container__secrets=[{"name": "hf-token", "env": "HF_TOKEN"}])
    text = render_units(recipe, podman_version=version).files[0].text
    podman_args = " ".join(_values(text, "PodmanArgs"))
    assert bool(_values(text, "HealthCmd")) is expected["health"]
    assert ("--health-cmd" in podman_args) is not expected["health"]
    assert ("--health-on-failure=kill" in podman_args or _values(text, "HealthOnFailure") == ["kill"])
    assert bool(_values(text, "Secret")) is expected["secret"]
    assert ("--secret hf-token,type=env,target=HF_TOKEN" in podman_args) is not expected["secret"]
    assert bool(_values(text, "ShmSize")) is expected["shm"]
    assert ("--shm-size=8g" in podman_args) is not expected["shm"]
    assert bool(_values(text, "StopTimeout")) is expected["stop"]
    assert ("--stop-timeout=120" in podman_args) is not expected["stop"]
    assert ("Notify=healthy" in text) is expected["notify"]
    assert not _values(text, "ExecStartPre")


@pytest.mark.parametrize("version", [(4, 4), (4, 5), (4, 6), (4, 7), (4, 8), (5, 0), (5, 4)])
@pytest.mark.parametrize("name", ["glm53-flash", "glm53-flash-k3-dflash2", "qwen3-8b-vllm"])
def test_only_keys_the_quadlet_version_knows(name: str, version: tuple[int, int]) -> None:
    recipe = _recipe(name, engine__command=["/usr/bin/env", "vllm", "serve"],
                     container__secrets=[{"name": "tok", "env": "API_TOKEN"}])
    text = render_units(recipe, podman_version=version).files[0].text
    for key in _container_keys(text):
        assert QUADLET_KEYS[key] <= version, f"{key} needs quadlet {QUADLET_KEYS[key]}"


def test_entrypoint_by_version() -> None:
    recipe = _recipe(engine__command=["/usr/bin/env", "vllm", "serve"])
    new = render_units(recipe, podman_version=(5, 0)).files[0].text
    assert _values(new, "Entrypoint") == ["/usr/bin/env"]
    assert _values(new, "Exec")[0].startswith("vllm serve --model ")
    old = render_units(recipe, podman_version=(4, 9)).files[0].text
    assert not _values(old, "Entrypoint")
    assert "PodmanArgs=--entrypoint=/usr/bin/env" in old


@pytest.mark.parametrize("version", [(4, 4), (4, 7), (5, 4)])
def test_host_ipc_never_with_shm_size(version: tuple[int, int]) -> None:
    text = render_units(_recipe(), podman_version=version).files[0].text
    assert "PodmanArgs=--ipc=host" in text
    assert "ShmSize" not in text and "--shm-size" not in text


@pytest.mark.parametrize("scope", ["system", "user"])
def test_service_section(scope: str) -> None:
    recipe = _recipe()
    text = render_units(recipe, podman_version=(5, 4), scope="user" if scope == "user" else "system").files[0].text
    assert _values(text, "Restart") == ["always"]
    assert _values(text, "TimeoutStartSec") == [str(recipe.service.warmup_budget_s)]
    # the warmup is the startup check's (HealthStartupInterval), bounded by TimeoutStartSec: no start period
    assert _values(text, "HealthStartPeriod") == [] and _values(text, "HealthStartupInterval") == ["2s"]
    assert _values(text, "WantedBy") == ["multi-user.target" if scope == "system" else "default.target"]


@pytest.mark.parametrize(("text", "expected"), [
    ("5.4", (5, 4)), ("4.3.1", (4, 3)), ("podman version 4.3.1", (4, 3)), ("5.4.2-dev", (5, 4)),
])
def test_parse_version(text: str, expected: tuple[int, int]) -> None:
    assert parse_version(text) == expected


@pytest.mark.parametrize("text", ["5", "latest", "5.x", ""])
def test_parse_version_refuses(text: str) -> None:
    with pytest.raises(RenderError):
        parse_version(text)


@pytest.mark.parametrize(("podman", "quadlet", "startup"), [
    ((5, 4), (5, 4), True), ((5, 0), (5, 0), True),
    ((4, 8), (4, 8), False), ((4, 3), (5, 4), False),  # no Notify=healthy: nothing waits for the first check
])
def test_notify_healthy_gets_a_startup_check_that_polls_during_warmup(
    podman: tuple[int, int], quadlet: tuple[int, int], startup: bool
) -> None:
    # podman 5.4.2 on the testbed: with only the regular check (HealthInterval=30s) a unit whose engine was
    # warm after 3 s stayed `activating` until 38 s, so `up` attached to a ready engine instead of finding it
    # unchanged. The startup check runs every 2 s until it first passes, then the regular one takes over.
    text = render_units(_recipe("qwen3-8b-vllm"), podman_version=podman, quadlet_version=quadlet).files[0].text
    assert ("Notify=healthy" in text) is startup
    if startup:
        # the startup check is /health alone: the regular one adds the liveness rule before it (test_liveness)
        assert _values(text, "HealthCmd")[0].endswith("; " + _values(text, "HealthStartupCmd")[0])
        assert _values(text, "HealthStartupInterval") == ["2s"]
        assert _values(text, "HealthStartupSuccess") == ["1"]
        assert _values(text, "HealthInterval") == ["13s"]  # the default liveness window's (render.liveness)
        assert not _values(text, "HealthStartupRetries")  # a slow warmup is TimeoutStartSec's to end, not a restart
        # the startup check gates the regular one: a start period (from the container's start, as long as
        # the warmup budget) would only shield an engine that hangs after a short warmup
        assert not _values(text, "HealthStartPeriod")
    else:
        assert not [k for k in _container_keys(text) if k.startswith("HealthStartup")]
        assert _values(text, "HealthStartPeriod") or "--health-start-period=" in " ".join(_values(text, "PodmanArgs"))
