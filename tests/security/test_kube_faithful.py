"""Kubernetes and podman-kube manifests carry every string of the recipe to the container byte for byte.

Two things stood between the recipe and the engine. The YAML: PyYAML writes plain (unquoted) whatever its
own YAML 1.1 resolver reads back as a string, but ``1e6``, ``0o17``, ``+0o7``, ``1E+3``, ``0x1F`` or
``1_000`` are numbers to YAML 1.2 readers and to Go's yaml.v2 and yaml.v3, which Kubernetes and podman read
with (``--rope-theta 1e6`` reached the container as ``1e+06``). And ``$``: Kubernetes expands ``$(NAME)`` and
turns ``$$`` into ``$`` in command, args and env values (podman kube play from 4.7 in command and args).

The corpus goes into a recipe's engine args and container env through the real loader (``--set``, and a
recipe file), is rendered for both targets, read back by every YAML reader here and by a model of Go's
resolvers, expanded as Kubernetes expands, and compared with the recipe's values; on the testbed it runs
through the real ``podman kube play`` and the container prints what it got.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rigctl.recipe.load import load
from rigctl.render.kube import RenderedKube, dollars, render_kube
from rigctl.render.kubelint import (
    LintExpectations,
    expand,
    expansion_problem,
    lint,
    plain_is_string,
    yaml_problem,
    yaml_readers,
)
from rigctl.render.units import engine_process
from rigctl.severity import Severity

NUMERIC = [
    "1e6", "0o17", "+0o7", "1E+3", "0e0", "0x1F", "1_000", ".inf", "-.NaN", ".NAN", "+.Inf", "1:20", "190:20:30",
    "yes", "No", "ON", "off", "y", "N", "True", "FALSE", "~", "null", "NULL", "Null", "2001-12-14",
    "2001-12-14T21:59:43.10-05:00", "017", "0b101", "-0b1", "+12", "-1", "1.", ".5", "6.8523015e+5", "0.", "=", "<<",
    "", " ", "-", "--", "- x", "a: b", "#c", "a #c", "'", '"', "\\", "[1]", "{a: 1}", "*x", "&x", "!x", "%x", "@x",
    "|", ">", "?", "x:", "é", "1e6 ",
]
DOLLARS = ["$(HOME)", "$$", "a$b", "$(", "$", "$$(HOME)", "$(HOME)$", "x$", "$(X", "$)", "$é", "$$$", "${HOME}",
           "--rope-theta=$(THETA)"]
CORPUS = NUMERIC + DOLLARS
ENV = {f"V{i}": value for i, value in enumerate(CORPUS)}
# Kubernetes' mapping for the expansion: what the container's env and the injected Service variables define
DEFINED = {"HOME": "/root", "X": "x", "THETA": "1e+06", **ENV}


def _recipe(name: str = "qwen3-8b-vllm", *extra: str) -> Any:
    return load(name, sets=["engine.args=" + json.dumps(CORPUS), "container.env=" + json.dumps(ENV), *extra]).recipe


def _engine(documents: list[Any]) -> dict[str, Any]:
    container: dict[str, Any] = documents[0]["spec"]["template"]["spec"]["containers"][0]
    return container


def _renders() -> Iterator[tuple[str, RenderedKube]]:
    recipe = _recipe()
    yield "kube", render_kube(recipe)
    for podman in ((4, 3), (4, 7), (5, 4)):
        yield f"podman-kube-{podman[0]}.{podman[1]}", render_kube(recipe, target="podman-kube", podman_version=podman)


RENDERS = dict(_renders())


# --- a model of Go's YAML resolvers (gopkg.in/yaml.v2 and yaml.v3, resolve.go), independent of rigctl -----

_GO_MAP = {
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF",
    "true", "True", "TRUE", "false", "False", "FALSE", "null", "Null", "NULL", "~", "",
    ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN", "<<",
}
_GO_INT = re.compile(r"[-+]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")  # ParseInt, base 0
_GO_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_GO_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ].*)?")
_GO_PARSE_FLOAT = re.compile(r"(?i)[-+]?(\.[0-9]+(e[-+]?[0-9]+)?|inf(inity)?|nan)")


def go_reads_as_non_string(plain: str) -> bool:
    """Whether yaml.v2 or yaml.v3 resolves this plain scalar to something else than the string."""
    if plain in _GO_MAP:
        return True
    if plain[:1] in "+-0123456789":
        digits = plain.replace("_", "")
        return bool(_GO_INT.fullmatch(digits) or _GO_YAML_FLOAT.fullmatch(digits) or _GO_TIMESTAMP.fullmatch(plain))
    if plain[:1] == ".":
        return bool(_GO_PARSE_FLOAT.fullmatch(plain))
    return False


def _plain_scalars(node: yaml.Node) -> Iterator[str]:
    if isinstance(node, yaml.ScalarNode):
        if node.style is None:
            yield node.value
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _plain_scalars(item)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield from _plain_scalars(key)
            yield from _plain_scalars(value)


def _typed(value: Any) -> str:
    """JSON with the types showing: '1' and 1, true and 1 differ; a date is not JSON and fails."""
    return json.dumps(value, sort_keys=False)


# --- the YAML ------------------------------------------------------------------------------------------


def test_a_yaml_12_reader_is_here() -> None:
    """The read-back below means something only with an independent YAML 1.2 reader (a dev dependency)."""
    assert [name for name, _ in yaml_readers()] == [
        "PyYAML (YAML 1.1)", "ruamel.yaml (YAML 1.2)", "ruamel.yaml (YAML 1.1)"]


@pytest.mark.parametrize("flavour", RENDERS)
@pytest.mark.parametrize("reader", [name for name, _ in yaml_readers()])
def test_every_reader_reads_the_rendered_documents_back(flavour: str, reader: str) -> None:
    rendered = RENDERS[flavour]
    load_all = dict(yaml_readers())[reader]
    assert _typed(load_all(rendered.yaml_file.text)) == _typed(rendered.manifests)


@pytest.mark.parametrize("flavour", RENDERS)
def test_no_plain_scalar_is_a_number_to_go(flavour: str) -> None:
    text = RENDERS[flavour].yaml_file.text
    for root in yaml.compose_all(text, Loader=yaml.SafeLoader):
        for plain in _plain_scalars(root):
            # a plain scalar is either one of rigctl's numbers and booleans (the same to every reader) or a
            # string Go reads as a string too
            if not re.fullmatch(r"[0-9]+|true|false", plain):
                assert not go_reads_as_non_string(plain), plain


@pytest.mark.parametrize("value", CORPUS)
def test_the_plain_rule_agrees_with_go_and_both_yaml_versions(value: str) -> None:
    """plain_is_string never lets through what any reader (Go's, ruamel's 1.1 and 1.2, PyYAML) takes for
    a non-string; the corpus is the issue's and more."""
    if not plain_is_string(value):
        return
    assert not go_reads_as_non_string(value)
    for name, load_all in yaml_readers():
        assert load_all(f"v: {value}\n") == [{"v": value}], name


@pytest.mark.parametrize("flavour", RENDERS)
def test_the_engine_gets_the_recipes_args_and_env(flavour: str) -> None:
    """Read with the YAML 1.2 reader, then expanded where the runtime expands: the recipe's values."""
    rendered = RENDERS[flavour]
    process = engine_process(_recipe())
    _, read = yaml_readers()[1]
    container = _engine(read(rendered.yaml_file.text))
    expanded = {"kube": ("args", "env"), "podman-kube-4.3": ()}.get(flavour, ("args",))

    def arrives(field: str, value: str) -> str:
        return expand(value, lambda name: DEFINED.get(name, f"$({name})")) if field in expanded else value

    args = [arrives("args", a) for a in container["args"]]
    assert args == process.args
    assert args[-len(CORPUS):] == CORPUS
    env = {e["name"]: arrives("env", e["value"]) for e in container["env"]}
    assert {k: env[k] for k in ENV} == ENV


def test_a_recipe_file_carries_the_corpus_too(tmp_path: Path) -> None:
    """The same through a recipe file, for the kube target, with the engine's command overridden."""
    data = load("qwen3-8b-vllm").recipe.model_dump(mode="json")
    data["engine"]["command"] = ["/bin/sh", "-c", 'printf "%s" "$@"', *CORPUS[:10]]
    data["engine"]["args"] = CORPUS
    data["container"]["env"] = ENV
    path = tmp_path / "faithful.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    rendered = render_kube(load(str(path)).recipe)
    process = engine_process(load(str(path)).recipe)
    for _name, read in yaml_readers():
        container = _engine(read(rendered.yaml_file.text))
        got = [expand(w, lambda name: DEFINED.get(name, f"$({name})")) for w in (*container["command"], *container["args"])]
        assert got == [*(process.entrypoint or []), *process.args]


# --- the lint fails on what the old renderer wrote -------------------------------------------------------


def _pyyaml_plain(documents: list[Any]) -> str:
    """What rigctl printed before: PyYAML's own choice of quotes."""
    return yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True, width=1 << 20)


def test_yaml_faithful_fails_on_pyyaml_plain_numbers() -> None:
    rendered = RENDERS["kube"]
    old = _pyyaml_plain(rendered.manifests)
    assert "- 1e6\n" in old  # PyYAML leaves it plain: a string to PyYAML only
    problem = yaml_problem(old, rendered.manifests)
    assert problem is not None and "must be quoted" in problem
    problem = yaml_problem("---\nargs:\n- 1e6\n", [{"args": ["1e6"]}])
    assert problem is not None and "'1e6'" in problem
    assert yaml_problem(rendered.yaml_file.text, rendered.manifests) is None


def test_yaml_faithful_fails_where_a_yaml_12_reader_reads_another_value() -> None:
    """What the plain-string rule cannot see (a number, not a string): 017 is 15 to YAML 1.1, 17 to 1.2."""
    problem = yaml_problem("---\na: 017\n", [{"a": 15}])
    assert problem is not None and problem.startswith("ruamel.yaml (YAML 1.2) reads /0/a: 17")
    assert yaml_problem("---\na: 15\n", [{"a": 15}]) is None


def test_expansion_rule_fails_on_an_unescaped_dollar() -> None:
    recipe = _recipe()
    rendered = RENDERS["kube"]
    process = engine_process(recipe)
    expect = LintExpectations(world=1, warmup_budget_s=recipe.service.warmup_budget_s, memory_bytes=1,
                              engine_command=(), engine_args=tuple(process.args), engine_env=tuple(process.env))
    assert next(r for r in rendered.lint if r.id == "expansion").severity is Severity.OK
    documents = json.loads(json.dumps(rendered.manifests))
    container = _engine(documents)
    container["args"] = list(process.args)  # as written before: $ not doubled
    result = next(r for r in lint(documents, expect) if r.id == "expansion")
    assert result.fails and "$(HOME)" in result.message
    container["args"] = [dollars(a) for a in process.args]
    container["env"] = [{"name": n, "value": v} for n, v in process.env]  # env unescaped
    result = next(r for r in lint(documents, expect) if r.id == "expansion")
    assert result.fails and result.message.startswith("env V")


# --- Kubernetes' expansion, as the Go code does it --------------------------------------------------------


@pytest.mark.parametrize(("value", "arrives"), [
    ("$(HOME)", "/root"), ("$$(HOME)", "$(HOME)"), ("$$", "$"), ("$$$", "$$"), ("a$b", "a$b"), ("$", "$"),
    ("x$", "x$"), ("$(", "$("), ("$(X", "$(X"), ("$(UNSET)", "$(UNSET)"), ("$(HOME)$(X)", "/rootx"),
    ("${HOME}", "${HOME}"), ("$é", "$\u00c3\udca9"),  # Go copies the byte after a lone $ as a rune of its own
])
def test_expand_is_kubernetes_expansion(value: str, arrives: str) -> None:
    assert expand(value, lambda name: {"HOME": "/root", "X": "x"}.get(name, f"$({name})")) == arrives


@pytest.mark.parametrize("value", CORPUS)
def test_doubling_every_dollar_survives_the_expansion(value: str) -> None:
    assert expand(dollars(value), lambda name: "EXPANDED") == value
    assert expansion_problem(dollars(value), value) is None


# --- for real: Go's readers, where Go and the libraries are installed ---------------------------------------

GO_PATH = Path("/usr/share/gocode")  # Debian's golang-*-dev packages
GO_LIBRARIES = ("gopkg.in/yaml.v2", "gopkg.in/yaml.v3", "sigs.k8s.io/yaml")


def test_kubernetes_own_yaml_reader_gets_every_value(tmp_path: Path, need: Any) -> None:
    """sigs.k8s.io/yaml (what kubectl and the API server read manifests with) into typed string fields:
    every arg and env value, once expanded, is the recipe's; yaml.v2 and yaml.v3 see only strings."""
    go = shutil.which("go")
    need(go is not None and all((GO_PATH / "src" / lib).is_dir() for lib in GO_LIBRARIES),
         "Go and its YAML libraries are not installed (golang-go golang-gopkg-yaml.v2-dev golang-gopkg-yaml.v3-dev "
         "golang-k8s-sigs-yaml-dev)")
    assert go is not None
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": str(GO_PATH), "GOFLAGS": ""}
    binary = tmp_path / "go-yaml-read"
    built = subprocess.run([go, "build", "-o", str(binary), str(Path(__file__).parent / "go_yaml" / "main.go")],
                           env=env, capture_output=True, text=True, timeout=240, check=False)
    assert built.returncode == 0, built.stderr
    manifest = tmp_path / "m.yaml"
    manifest.write_text(RENDERS["kube"].yaml_file.text)
    done = subprocess.run([str(binary), str(manifest)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)
    assert "k8s" in read, read
    mapping = lambda name: DEFINED.get(name, f"$({name})")  # noqa: E731
    args = [expand(a, mapping) for a in read["k8s"]["args"]]
    assert args == engine_process(_recipe()).args and args[-len(CORPUS):] == CORPUS
    env_read = {e["name"]: expand(e["value"], mapping) for e in read["k8s"]["env"]}
    assert {k: env_read[k] for k in ENV} == ENV
    assert set(read["v2_arg_types"]) == {"string"} and set(read["v3_arg_types"]) == {"string"}


# --- for real: podman kube play on the testbed -------------------------------------------------------------

PRINT = ("import json, os, sys; status = dict(l.split(':', 1) for l in open('/proc/self/status')); "
         "print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ), 'caps': status['CapEff'].strip(), "
         "'no_new_privs': status['NoNewPrivs'].strip()}), flush=True)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=False)


def _played_container(said: str) -> str:
    """The one container `podman kube play` started, by the ID it prints under "Container:". Its name is
    podman's convention, which changed: a Deployment's pod is NAME-pod-0 on podman 4.3, NAME-pod on 5.x, and
    the container POD-CONTAINER in both."""
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    assert "Container:" in lines, said
    ids = lines[lines.index("Container:") + 1:]
    ids = ids[:next((i for i, line in enumerate(ids) if line.endswith(":")), len(ids))]
    assert len(ids) == 1 and re.fullmatch(r"[0-9a-f]{64}", ids[0]), said
    return ids[0]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_podman_kube_play_hands_the_container_every_value(tmp_path: Path, need: Any) -> None:
    image = os.environ.get("RIGCTL_TEST_ENGINE_IMAGE", "")
    need(bool(os.environ.get("RIGCTL_TESTBED")) and bool(image) and shutil.which("podman") is not None,
         "the testbed (podman and the test-engine image) is not set up")
    version = _podman("version", "--format", "{{.Client.Version}}", timeout=30).stdout.strip()
    match = re.match(r"(\d+)\.(\d+)", version)
    assert match, version
    podman = (int(match.group(1)), int(match.group(2)))
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    name = f"kfaith{os.getpid()}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "description": "prints its argv and env", "family": "test", "served_name": "test-model",
        "image": image,
        "checkpoint": {"format": "safetensors", "source": "test/fake", "path": str(checkpoint), "shards": 1,
                       "total_bytes": 1000, "license": {"id": "apache-2.0"}},
        "engine": {"kind": "vllm", "port": 8000, "command": ["python3", "-c", PRINT, *CORPUS[:8]]},
        "context_length": 4096,
        "gpus": {"count": 0},
        "container": {"publish": {"port": _free_port()}, "shm_size": "64m",
                      "volumes": [{"host": str(checkpoint), "container": "/models/test"}]},
        "service": {"warmup_budget_s": 60, "stop_timeout_s": 5},
    }, sort_keys=False))
    recipe = load(str(path), sets=["engine.args=" + json.dumps(CORPUS), "container.env=" + json.dumps(ENV)]).recipe
    rendered = render_kube(recipe, target="podman-kube", podman_version=podman, quadlet_version=(5, 4),
                           namespace="rigctl-test")
    manifest = tmp_path / rendered.yaml_file.name
    manifest.write_text(rendered.yaml_file.text)
    process = engine_process(recipe)
    try:
        played = _podman("kube", "play", str(manifest))
        assert played.returncode == 0, played.stderr
        container = _played_container(played.stdout)
        waited = _podman("wait", container, timeout=90)
        assert waited.returncode == 0 and waited.stdout.strip() == "0", waited.stdout + waited.stderr
        logs = _podman("logs", container, timeout=30)
        printed = json.loads(logs.stdout.strip().splitlines()[-1])
    finally:
        down = _podman("kube", "down", str(manifest))
    assert down.returncode == 0, down.stderr
    assert process.entrypoint == ["python3"] and process.args[:2] == ["-c", PRINT]
    assert printed["argv"] == process.args[2:]  # python3 -c CODE: sys.argv[1:] is what follows CODE
    assert printed["argv"][:8] == CORPUS[:8] and printed["argv"][-len(CORPUS):] == CORPUS
    assert {k: printed["env"].get(k) for k in ENV} == ENV
    # kube play takes the securityContext: no capability left, no privilege to gain
    assert printed["caps"] == "0000000000000000" and printed["no_new_privs"] == "1", printed
    assert _podman("container", "exists", container, timeout=30).returncode == 1  # removed
