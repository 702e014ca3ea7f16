"""A semantic lint of rendered Kubernetes manifests: what a schema check cannot see.

``kubernetes-validate --strict`` rejects an unknown field, but it accepts a Deployment that asks for one GPU
while the engine shards over two, a startup probe that gives up during warmup (the most common reason a big
model never comes up on Kubernetes), an image by tag, and ``nvidia.com/gpu=all`` (a podman CDI name, which the
API server refuses). Each rule here looks at the manifests alone, against the few numbers the recipe fixes.
The renderer lints everything it renders; a failing rule is an error that names the rule.

Two rules look at what a reader makes of the manifests rather than at the manifests' meaning: the printed
YAML must read back as the very documents rendered, to PyYAML (YAML 1.1) and to a YAML 1.2 reader
(ruamel.yaml, where it is installed), and every plain (unquoted) string must be one that no YAML reader
takes for a number, boolean, null or date: Go's yaml.v2 and yaml.v3 (what Kubernetes and podman read
with) take ``1e6``, ``0o17``, ``+0o7``, ``1_000`` and ``0x1F`` for numbers where PyYAML sees strings.
And Kubernetes expands ``$(NAME)`` and turns ``$$`` into ``$`` in a container's command, args and env
values (podman kube play from 4.7 in command and args): what the engine gets after that expansion must be
the recipe's value.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from rigctl.errors import RigctlError
from rigctl.exitcodes import ExitCode
from rigctl.findings import Finding
from rigctl.recipe.reference import IMAGE_RE
from rigctl.severity import Severity

GPU_RESOURCE = "nvidia.com/gpu"
SHM_PATH = "/dev/shm"

# Kubernetes' qualified name: an optional DNS-subdomain prefix and a name of at most 63 characters.
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")  # a qualified name's name, a label value
# Unprefixed resource names a container may ask for; anything else needs a domain prefix.
_STANDARD = re.compile(r"cpu|memory|ephemeral-storage|hugepages-[0-9]+[KMGTPE]i?")
# A CDI device name (vendor/class=device): what podman >= 5.4 takes as a kube play resource key.
_CDI_NAME = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?/[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?"
    r"=[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?"
)
# A plain scalar every YAML reader takes for a string: YAML 1.1 and 1.2 (core and JSON schema), PyYAML,
# ruamel.yaml, Go's yaml.v2 and yaml.v3. It starts with a letter or '/' (after at most two '-'), so it is
# no number in any spelling (digits, '+', '.', '.inf', '0x', '1_000', '1:20', dates), and holds no
# character that means something in YAML (space, '#', ',', '[', quotes ...), nor ends with ':'. The words
# below are booleans or null in some reader, whatever their case.
_PLAIN_SAFE = re.compile(r"(?:--?)?[A-Za-z/][A-Za-z0-9_./@=+:-]*(?<!:)")
_NOT_STRINGS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})
# Kubernetes quantities (the forms rigctl writes and the common ones): memory in bytes with a binary or
# decimal suffix, cpu in cores or millicores.
_MEMORY = re.compile(r"([0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_CPU = re.compile(r"[0-9]+(\.[0-9]+)?m?")
_MEMORY_UNIT = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
                "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
# A DNS-1123 label: what a namespace name must be.
DNS_LABEL_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
EXPANDED_FIELDS = ("command", "args", "env")


@dataclass(frozen=True)
class LintExpectations:
    """What the recipe fixes. ``world``: tensor x pipeline x data parallel, the GPUs the engine shards over;
    ``gpus_passed``: False where the target cannot pass GPUs at all (podman kube play before 5.4), so the GPU
    request is not compared; ``cdi_names``: resource keys may be CDI device names (podman-kube only)."""

    world: int
    warmup_budget_s: int
    cdi_names: bool = False
    gpus_passed: bool = True
    # a cluster's scheduler places the pods (Kubernetes): cpu and memory requests and the GPU toleration
    # matter; False for podman kube play on one box
    cluster: bool = True
    memory_bytes: int = 0  # the least memory request for the engine: what it loads (the checkpoint)
    namespace: str | None = None  # every object must be in this namespace (None: any one, the same for all)
    # where the runtime expands $(NAME) and $$ (Kubernetes: all three; podman >= 4.7: command and args)
    expanded: tuple[str, ...] = EXPANDED_FIELDS
    # what the engine must receive after that expansion (None: not compared)
    engine_command: tuple[str, ...] | None = None
    engine_args: tuple[str, ...] | None = None
    engine_env: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True)
class _Said:
    """What a rule found; the registry makes it a Finding under the rule's own id."""

    severity: Severity
    message: str


def _passed(message: str) -> _Said:
    return _Said(Severity.OK, message)


def _failed(message: str) -> _Said:
    return _Said(Severity.FAIL, message)


@dataclass(frozen=True)
class LintInput:
    """What every rule looks at: the manifests, what the recipe and target expect of them, and the YAML
    text printed for them (None when there is none to read back)."""

    documents: Sequence[Mapping[str, Any]]
    expect: LintExpectations
    text: str | None = None


# The lint rules, in the order they run and are reported: a new rule is a function decorated @_rule(ID)
# below; RULES lists their ids (tests and `explain` read it).
_REGISTRY: dict[str, Callable[[LintInput], Finding]] = {}


def _rule(rule_id: str) -> Callable[[Callable[[LintInput], _Said]], Callable[[LintInput], _Said]]:
    def add(check: Callable[[LintInput], _Said]) -> Callable[[LintInput], _Said]:
        if rule_id in _REGISTRY:
            raise ValueError(f"lint rule {rule_id} is registered twice")

        def finding(given: LintInput) -> Finding:  # a rule reports under its own id: it names it only here
            said = check(given)
            return Finding(id=rule_id, severity=said.severity, message=said.message)

        _REGISTRY[rule_id] = finding
        return check

    return add


class KubeLintError(RigctlError):
    """A rendered manifest broke a lint rule: the render is refused, not printed."""

    exit_code = ExitCode.INVALID_INPUT
    code = "lint-failed"


def lint(documents: Sequence[Mapping[str, Any]], expect: LintExpectations, text: str | None = None) -> list[Finding]:
    """One result per rule, in RULES order. ``text``: the YAML printed for ``documents`` (yaml-faithful
    checks it reads back as them)."""
    given = LintInput(documents, expect, text)
    return [check(given) for check in _REGISTRY.values()]


def require_clean(results: Sequence[Finding]) -> None:
    failed = [r for r in results if r.fails]
    if failed:
        raise KubeLintError(
            "\n".join(f"lint rule {r.id} failed: {r.message}" for r in failed),
            fix="change what the rule names (an option you gave, or the recipe); a failure in what rigctl derives "
                "itself is a defect: report it with the recipe",
        )


# --- walking the manifests ---------------------------------------------------------------------------


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _pod_spec(document: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(_mapping(document.get("spec")).get("template")).get("spec"))


def _deployments(documents: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [d for d in documents if isinstance(d, Mapping) and d.get("kind") == "Deployment"]


def _containers(spec: Mapping[str, Any], *, init: bool = False) -> Iterator[Mapping[str, Any]]:
    keys = ("containers", "initContainers") if init else ("containers",)
    for key in keys:
        for container in _list(spec.get(key)):
            yield _mapping(container)


def _all_containers(documents: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for document in documents:
        if not isinstance(document, Mapping):
            continue
        where = f"{document.get('kind', '?')}/{_mapping(document.get('metadata')).get('name', '?')}"
        for container in _containers(_pod_spec(document), init=True):
            yield f"{where} container {container.get('name', '?')}", container


def _resource_keys(container: Mapping[str, Any]) -> list[tuple[str, object]]:
    resources = _mapping(container.get("resources"))
    return [(str(key), value) for part in ("limits", "requests")
            for key, value in _mapping(resources.get(part)).items()]


def _whole(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


# --- the rules ---------------------------------------------------------------------------------------


def _gpus_requested(container: Mapping[str, Any], cdi_names: bool) -> tuple[int, str | None]:
    """(GPUs the container asks for, a problem or None). Limits are what the device plugin allocates."""
    limits = _mapping(_mapping(container.get("resources")).get("limits"))
    count = 0
    if GPU_RESOURCE in limits:
        value = _whole(limits[GPU_RESOURCE])
        if value is None:
            return 0, f"{GPU_RESOURCE}: {limits[GPU_RESOURCE]!r} is not a whole number"
        count += value
    if cdi_names:
        for key in limits:
            if str(key).startswith(GPU_RESOURCE + "="):
                if str(key).endswith("=all"):
                    return 0, f"{key} passes every GPU of the host, however many: name each GPU"
                count += 1
    return count, None


@_rule("gpu-count")
def _gpu_count(given: LintInput) -> _Said:
    documents, expect = given.documents, given.expect
    if not expect.gpus_passed:
        return _passed("not compared: this target passes no GPUs")
    total = 0
    for deployment in _deployments(documents):
        for container in _containers(_pod_spec(deployment)):
            count, problem = _gpus_requested(container, expect.cdi_names)
            if problem is not None:
                return _failed(problem)
            total += count
    if total != expect.world:
        return _failed(
            f"the Deployment asks for {total} GPU(s) but the engine shards over tensor x pipeline x data "
            f"parallel = {expect.world}"
        )
    return _passed(f"{total} GPU(s) = tensor x pipeline x data parallel")


def _memory_shm(spec: Mapping[str, Any], container: Mapping[str, Any]) -> bool:
    memory_volumes = {
        v.get("name") for v in map(_mapping, _list(spec.get("volumes")))
        if _mapping(v.get("emptyDir")).get("medium") == "Memory"
    }
    return any(
        m.get("mountPath") == SHM_PATH and m.get("name") in memory_volumes
        for m in map(_mapping, _list(container.get("volumeMounts")))
    )


def _unbounded_shm(spec: Mapping[str, Any], container: Mapping[str, Any]) -> bool:
    """A memory-backed emptyDir at /dev/shm without sizeLimit: it may take the node's memory."""
    names = {m.get("name") for m in map(_mapping, _list(container.get("volumeMounts")))
             if m.get("mountPath") == SHM_PATH}
    return any(
        v.get("name") in names and _mapping(v.get("emptyDir")).get("medium") == "Memory"
        and memory_bytes(_mapping(v.get("emptyDir")).get("sizeLimit")) is None
        for v in map(_mapping, _list(spec.get("volumes")))
    )


@_rule("shm")
def _shm(given: LintInput) -> _Said:
    documents, expect = given.documents, given.expect
    for deployment in _deployments(documents):
        spec = _pod_spec(deployment)
        for container in _containers(spec):
            if _unbounded_shm(spec, container):
                return _failed(
                    f"container {container.get('name', '?')}: the memory-backed emptyDir at {SHM_PATH} has no "
                    "sizeLimit (a quantity): it can fill the node's memory"
                )
    if expect.world <= 1:
        return _passed("one GPU or none: the default /dev/shm will do")
    for deployment in _deployments(documents):
        spec = _pod_spec(deployment)
        for container in _containers(spec):
            if not _memory_shm(spec, container):
                return _failed(
                    f"container {container.get('name', '?')} shards over {expect.world} GPUs but has no "
                    f"memory-backed emptyDir at {SHM_PATH}: NCCL falls over on the container's default 64 MiB"
                )
    return _passed(f"{SHM_PATH} is a memory-backed emptyDir with a sizeLimit")


def _probe_seconds(probe: Mapping[str, Any]) -> int:
    """How long a probe keeps trying before it gives up (Kubernetes' defaults where a field is absent)."""
    delay = _whole(probe.get("initialDelaySeconds", 0)) or 0
    period = _whole(probe.get("periodSeconds", 10)) or 0
    failures = _whole(probe.get("failureThreshold", 3)) or 0
    return delay + period * failures


@_rule("probe-budget")
def _probe_budget(given: LintInput) -> _Said:
    documents, expect = given.documents, given.expect
    budget = expect.warmup_budget_s
    deployments = _deployments(documents)
    if not deployments:
        return _failed("no Deployment to check")
    for deployment in deployments:
        deadline = _whole(_mapping(deployment.get("spec")).get("progressDeadlineSeconds", 600)) or 0
        if deadline <= budget:
            return _failed(
                f"progressDeadlineSeconds {deadline} is not above the warmup budget {budget} s: the rollout "
                "would be reported failed while the model is still loading"
            )
        for container in _containers(_pod_spec(deployment)):
            probe = container.get("startupProbe")
            if not isinstance(probe, Mapping):
                return _failed(
                    f"container {container.get('name', '?')} has no startupProbe: its liveness probe would "
                    "kill it during warmup"
                )
            seconds = _probe_seconds(probe)
            if seconds < budget:
                return _failed(
                    f"container {container.get('name', '?')}: the startupProbe gives up after {seconds} s "
                    f"(initialDelaySeconds + periodSeconds x failureThreshold), before the warmup budget of "
                    f"{budget} s: the container is killed while the model loads"
                )
    return _passed(f"startup probe and progress deadline cover the {budget} s warmup")


@_rule("image-pinned")
def _image_pinned(given: LintInput) -> _Said:
    documents = given.documents
    seen = 0
    for where, container in _all_containers(documents):
        image = container.get("image")
        if not isinstance(image, str) or not IMAGE_RE.fullmatch(image):
            return _failed(
                f"{where}: image {image!r} is not pinned by digest (NAME[:TAG]@sha256:<64 hex>): a tag can "
                "move under a running deployment"
            )
        seen += 1
    if not seen:
        return _failed("no container found")
    return _passed(f"{seen} image(s) pinned by digest")


def resource_name_problem(name: str, *, cdi_names: bool = False) -> str | None:
    """Why ``name`` cannot be a container resource name, or None."""
    if cdi_names and _CDI_NAME.fullmatch(name):
        return None
    if "=" in name:
        return (f"{name!r} is a CDI device name (podman kube play >= 5.4), which Kubernetes refuses: '=' is not "
                "allowed in a resource name")
    prefix, _, part = name.rpartition("/")
    if not part or len(part) > 63 or not NAME_PART.fullmatch(part):
        return f"{name!r} is not a qualified name"
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"{name!r}: its prefix {prefix!r} is not a DNS subdomain"
    if not prefix and not _STANDARD.fullmatch(name):
        return f"{name!r} is neither a standard resource (cpu, memory, ...) nor prefixed by a domain"
    return None


@_rule("resource-names")
def _resource_names(given: LintInput) -> _Said:
    documents, expect = given.documents, given.expect
    for where, container in _all_containers(documents):
        for key, _value in _resource_keys(container):
            problem = resource_name_problem(key, cdi_names=expect.cdi_names)
            if problem is not None:
                return _failed(f"{where}: {problem}")
    return _passed("every resource name is valid for the target")


# --- what readers make of the text -------------------------------------------------------------------


def plain_is_string(value: str) -> bool:
    """Whether ``value`` may be written as a plain (unquoted) YAML scalar: every reader takes it for this
    same string. Anything else must be quoted."""
    return _PLAIN_SAFE.fullmatch(value) is not None and value.lower() not in _NOT_STRINGS


def _load_pyyaml(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=yaml.SafeLoader))


def _ruamel(version: tuple[int, int] | None) -> Callable[[str], list[Any]] | None:
    try:
        from ruamel.yaml import YAML  # noqa: PLC0415 - optional: a development dependency, used where present
    except ImportError:  # pragma: no cover - installed with the development dependencies
        return None

    def load(text: str) -> list[Any]:
        reader = YAML(typ="safe", pure=True)
        if version is not None:
            reader.version = version
        with warnings.catch_warnings():  # YAML 1.1 floats without a dot: read anyway, the value is what counts
            warnings.simplefilter("ignore")
            return list(reader.load_all(text))

    return load


def yaml_readers() -> list[tuple[str, Callable[[str], list[Any]]]]:
    """(name, load-all) for every reader the read-back check uses here: PyYAML always, ruamel.yaml's YAML 1.2
    and YAML 1.1 readers where ruamel.yaml is installed."""
    readers: list[tuple[str, Callable[[str], list[Any]]]] = [("PyYAML (YAML 1.1)", _load_pyyaml)]
    for name, version in (("ruamel.yaml (YAML 1.2)", None), ("ruamel.yaml (YAML 1.1)", (1, 1))):
        load = _ruamel(version)
        if load is not None:
            readers.append((name, load))
    return readers


def _difference(want: object, got: object, path: str) -> str | None:
    """Where ``got`` differs from ``want``, types included (1 is not True, '1' is not 1), or None."""
    if isinstance(want, Mapping):
        if not isinstance(got, Mapping) or list(got) != list(want):
            return f"{path or '/'}: keys {list(got) if isinstance(got, Mapping) else got!r}, not {list(want)}"
        for key, value in want.items():
            found = _difference(value, got[key], f"{path}/{key}")
            if found:
                return found
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{path}: {got!r}, not {want!r}"
        for index, (a, b) in enumerate(zip(want, got, strict=True)):
            found = _difference(a, b, f"{path}/{index}")
            if found:
                return found
        return None
    if type(want) is not type(got) or want != got:
        return f"{path}: {got!r} ({type(got).__name__}), not {want!r} ({type(want).__name__})"
    return None


def _plain_strings(node: yaml.Node) -> Iterator[yaml.ScalarNode]:
    if isinstance(node, yaml.ScalarNode):
        if node.style is None and node.tag == "tag:yaml.org,2002:str":
            yield node
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _plain_strings(item)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield from _plain_strings(key)
            yield from _plain_strings(value)


def yaml_problem(text: str, documents: Sequence[Any]) -> str | None:
    """Why ``text`` does not carry ``documents`` to every reader, or None: a plain string some reader takes
    for something else, or a reader that reads other values back."""
    try:
        for root in yaml.compose_all(text, Loader=yaml.SafeLoader):
            for node in _plain_strings(root) if root is not None else ():
                if not plain_is_string(node.value):
                    return (f"line {node.start_mark.line + 1}: the plain scalar {node.value!r} is a string to PyYAML, "
                            "not surely to every YAML reader (YAML 1.2 and Go's yaml.v2 and yaml.v3 read numbers, "
                            "booleans, null and dates in more spellings): it must be quoted")
    except yaml.YAMLError as error:
        return f"not YAML: {error}"
    for name, load in yaml_readers():
        try:
            loaded = load(text)
        except Exception as error:  # any reader's failure is the finding
            return f"{name} cannot read it: {error}"
        found = _difference(list(documents), loaded, "")
        if found:
            return f"{name} reads {found}"
    return None


@_rule("yaml-faithful")
def _yaml_faithful(given: LintInput) -> _Said:
    documents, text = given.documents, given.text
    if text is None:
        return _passed("not checked: no YAML text given")
    problem = yaml_problem(text, documents)
    if problem is not None:
        return _failed(problem)
    readers = ", ".join(name for name, _ in yaml_readers())
    return _passed(f"every value reads back unchanged ({readers}); plain strings are "
                                             "strings to every YAML reader")


# --- $(NAME) and $$ ------------------------------------------------------------------------------------


def expand(value: str, mapping: Callable[[str], str]) -> str:
    """Kubernetes' expansion of a command, args or env value (third_party/forked/golang/expansion, which
    podman >= 4.7 also runs): ``$$`` is ``$``, ``$(NAME)`` is ``mapping(NAME)``, any other ``$`` stays.
    Byte for byte as the Go code, which copies the byte after a lone ``$`` as a character of its own."""
    data = value.encode()
    out = bytearray()
    checkpoint = cursor = 0
    while cursor < len(data):
        if data[cursor] == 0x24 and cursor + 1 < len(data):  # '$' with something after it
            out += data[checkpoint:cursor]
            rest = data[cursor + 1 :]
            advance = 1
            if rest[0] == 0x24:
                out += b"$"
            elif rest[0] == 0x28:  # '('
                close = rest.find(b")", 1)
                if close == -1:
                    out += b"$("
                else:
                    out += mapping(rest[1:close].decode(errors="surrogateescape")).encode(errors="surrogateescape")
                    advance = close + 1
            else:
                out += b"$" + chr(rest[0]).encode()
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out += data[checkpoint:]
    return out.decode(errors="surrogateescape")


def expansion_problem(value: str, want: str) -> str | None:
    """Why ``value`` does not reach the container as ``want`` once expanded, or None. Every ``$(NAME)`` counts
    as a reference: the container's env and the Service variables Kubernetes injects may define it."""
    references: list[str] = []

    def mapping(name: str) -> str:
        references.append(name)
        return f"$({name})"

    got = expand(value, mapping)
    if references:
        return f"{value!r} refers to $({references[0]}), which Kubernetes expands: write a literal $ as $$"
    if got != want:
        return f"{value!r} becomes {got!r}, not {want!r}"
    return None


def _engine_container(documents: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for deployment in _deployments(documents):
        for container in _containers(_pod_spec(deployment)):
            return container
    return None


@_rule("expansion")
def _expansion(given: LintInput) -> _Said:
    documents, expect = given.documents, given.expect
    wanted = (expect.engine_command, expect.engine_args, expect.engine_env)
    if all(w is None for w in wanted):
        return _passed("not compared: no engine values given")
    container = _engine_container(documents)
    if container is None:
        return _failed("no engine container found")

    def decoded(field: str, value: str, want: str) -> str | None:
        if field in expect.expanded:
            return expansion_problem(value, want)
        return None if value == want else f"{value!r}, not {want!r}"

    for field, want_list in (("command", expect.engine_command), ("args", expect.engine_args)):
        if want_list is None:
            continue
        got = [str(v) for v in _list(container.get(field))]
        if len(got) != len(want_list):
            return _failed(f"{field}: {len(got)} words, not {len(want_list)}")
        for index, (value, want) in enumerate(zip(got, want_list, strict=True)):
            problem = decoded(field, value, want)
            if problem:
                return _failed(f"{field}[{index}]: {problem}")
    if expect.engine_env is not None:
        got_env = [(str(e.get("name")), str(e.get("value"))) for e in map(_mapping, _list(container.get("env")))
                   if "value" in e]
        if [n for n, _ in got_env] != [n for n, _ in expect.engine_env]:
            return _failed(f"env names {[n for n, _ in got_env]}, not "
                                                  f"{[n for n, _ in expect.engine_env]}")
        for (name, value), (_, want) in zip(got_env, expect.engine_env, strict=True):
            problem = decoded("env", value, want)
            if problem:
                return _failed(f"env {name}: {problem}")
    where = ", ".join(expect.expanded) or "nothing"
    return _passed(f"the engine gets the recipe's command, args and env ($(NAME) and $$ "
                                         f"expanded in: {where})")


# --- a shared cluster ----------------------------------------------------------------------------------


def memory_bytes(quantity: object) -> int | None:
    """A memory quantity's bytes (``184Gi``, ``512Mi``, ``1000``), or None where it is none."""
    if isinstance(quantity, bool):
        return None
    if isinstance(quantity, int):
        return quantity
    match = _MEMORY.fullmatch(quantity) if isinstance(quantity, str) else None
    return int(match.group(1)) * _MEMORY_UNIT[match.group(2)] if match else None


@_rule("requests")
def _requests(given: LintInput) -> _Said:
    documents, expect = given.documents, given.expect
    if not expect.cluster:
        return _passed("not required: podman kube play places nothing")
    engine = _engine_container(documents)
    for where, container in _all_containers(documents):
        requests = _mapping(_mapping(container.get("resources")).get("requests"))
        cpu, memory = requests.get("cpu"), memory_bytes(requests.get("memory"))
        if not (isinstance(cpu, str) and _CPU.fullmatch(cpu)) and _whole(cpu) is None:
            return _failed(f"{where}: no cpu request: the scheduler would place it on a "
                                                 "full node")
        if memory is None:
            return _failed(f"{where}: no memory request: the scheduler would place it "
                                                 "where its load does not fit")
        if container is engine and memory < expect.memory_bytes:
            return _failed(
                f"{where}: the memory request ({requests.get('memory')}) is below the {expect.memory_bytes} bytes "
                "the engine loads"
            )
    return _passed("every container requests cpu and memory; the engine at least what it loads")


def _security_problem(context: Mapping[str, Any]) -> str | None:
    if context.get("allowPrivilegeEscalation") is not False:
        return "allowPrivilegeEscalation is not false"
    if context.get("privileged") is True:
        return "it is privileged"
    capabilities = _mapping(context.get("capabilities"))
    if "ALL" not in _list(capabilities.get("drop")):
        return "capabilities do not drop ALL"
    if _list(capabilities.get("add")):
        return f"capabilities add {_list(capabilities.get('add'))}"
    if not isinstance(context.get("readOnlyRootFilesystem"), bool):
        return "readOnlyRootFilesystem is not said (true or false)"
    return None


@_rule("security-context")
def _security_context(given: LintInput) -> _Said:
    documents = given.documents
    for where, container in _all_containers(documents):
        problem = _security_problem(_mapping(container.get("securityContext")))
        if problem is not None:
            return _failed(f"{where}: securityContext: {problem}")
    return _passed("no container escalates privileges or keeps a capability")


def _tolerates_gpu_taint(toleration: Mapping[str, Any]) -> bool:
    if toleration.get("effect") not in (None, "", "NoSchedule"):
        return False
    if toleration.get("key") in (None, "") and toleration.get("operator") == "Exists":
        return True  # tolerates every taint
    return toleration.get("key") == GPU_RESOURCE and toleration.get("operator") == "Exists"


@_rule("gpu-toleration")
def _gpu_toleration(given: LintInput) -> _Said:
    documents, expect = given.documents, given.expect
    if not expect.cluster or expect.world == 0:
        return _passed("not needed: no GPU node to schedule onto")
    for deployment in _deployments(documents):
        tolerations = map(_mapping, _list(_pod_spec(deployment).get("tolerations")))
        if not any(_tolerates_gpu_taint(t) for t in tolerations):
            return _failed(
                f"the pod does not tolerate the {GPU_RESOURCE}:NoSchedule taint GPU nodes usually carry "
                f"(key {GPU_RESOURCE}, operator Exists): it would never be scheduled there"
            )
    return _passed(f"the pod tolerates {GPU_RESOURCE}:NoSchedule")


@_rule("namespace")
def _namespace(given: LintInput) -> _Said:
    documents, expect = given.documents, given.expect
    found = {f"{d.get('kind', '?')}/{_mapping(d.get('metadata')).get('name', '?')}":
             _mapping(d.get("metadata")).get("namespace") for d in documents if isinstance(d, Mapping)}
    if len(set(found.values())) > 1:
        return _failed(f"the objects are in different namespaces ({found}): the Service and "
                                              "the Job reach the engine only within one")
    bad = [ns for ns in found.values() if ns is not None and not (
        isinstance(ns, str) and len(ns) <= 63 and DNS_LABEL_1123.fullmatch(ns))]
    if bad:
        return _failed(f"namespace {bad[0]!r} is not a DNS-1123 label (lowercase letters, "
                                              "digits and '-', at most 63)")
    if expect.namespace is not None:
        wrong = [w for w, ns in found.items() if ns != expect.namespace]
        if wrong:
            return _failed(f"{', '.join(wrong)}: not in namespace {expect.namespace}")
        return _passed(f"every object is in namespace {expect.namespace}")
    return _passed("every object is in the same namespace")


RULES = tuple(_REGISTRY)  # every rule above, in the order they run
