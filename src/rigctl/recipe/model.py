"""The recipe: everything needed to serve one model on one box, validated strictly.

Every model is frozen and forbids unknown keys. Every string that can reach a unit file is a
``UnitStr`` (no newline, no control character); every host path is absolute and free of ``..``.
Rules that span fields (host IPC with an explicit shm size, parallel sizes against the GPU count)
live in model validators so that a recipe that loads is a recipe that can be rendered.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rigctl.podman_args import RunCommand, podman_args
from rigctl.recipe import defaults
from rigctl.recipe.names import default_container, recipe_name_problem
from rigctl.recipe.reference import IMAGE_RE
from rigctl.util.fields import empty_list

# The exact error podman prints for `--ipc=host --shm-size=...` (podman 4.x and 5.x).
PODMAN_IPC_SHM_ERROR = (
    "Error: invalid config provided: cannot set shmsize when running in the host IPC Namespace"
)

# Every character that ends a line for some reader of a recipe value, or that a unit file cannot carry:
# C0 controls (LF, CR, VT, FF, FS/GS/RS for Python's str.splitlines(); CR and NUL for systemd), DEL,
# C1 controls (U+0085 NEXT LINE ends a line for splitlines()), U+2028 and U+2029. quadlet and systemd
# take the Unicode ones as plain characters, so a unit would look clean to them, while any Python
# reader of the same text (an editor, doctor's old parser) sees extra lines: refused in every field.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CHAR_NAMES = {
    "\x00": "NULL", "\t": "CHARACTER TABULATION", "\n": "LINE FEED", "\x0b": "LINE TABULATION",
    "\x0c": "FORM FEED", "\r": "CARRIAGE RETURN", "\x1c": "FILE SEPARATOR", "\x1d": "GROUP SEPARATOR",
    "\x1e": "RECORD SEPARATOR", "\x1f": "UNIT SEPARATOR", "\x7f": "DELETE", "\x85": "NEXT LINE",
    "\u2028": "LINE SEPARATOR", "\u2029": "PARAGRAPH SEPARATOR",
}


def char_name(ch: str) -> str:
    """``U+2028 LINE SEPARATOR``: how a refused character is named in messages."""
    fallback = "C1 control character" if "\x80" <= ch <= "\x9f" else "control character"
    return f"U+{ord(ch):04X} {_CHAR_NAMES.get(ch, fallback)}"


def control_problem(value: str) -> str | None:
    """Why ``value`` cannot be carried into a unit file (a line break or control character), or None."""
    match = _CONTROL.search(value)
    if match is None:
        return None
    return (
        f"contains {char_name(match.group())} at offset {match.start()}: line breaks and control characters "
        "cannot be carried safely into a unit file"
    )


def _no_control(value: str) -> str:
    problem = control_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _holds_model(annotation: object) -> bool:
    """Whether a field's type has a model in it (those check their own fields)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_model(arg) for arg in get_args(annotation))


def _refuse_control(value: object, keys: bool, where: str = "") -> None:
    """Refuse a line break in a raw field value that is a string, or in a key of a mapping (env names,
    checksum file names). List items and mapping values are refused by their own types (every string
    alias here carries the check), which names their exact place (``engine.args.1``)."""
    if isinstance(value, str):
        problem = control_problem(value)
        if problem:
            raise ValueError(f"{where}{problem}")
    elif keys and isinstance(value, Mapping):
        for key in value:
            _refuse_control(key, False, f"{where}key {key!r} ")


def _no_control_before(value: object) -> object:
    """``_no_control`` ahead of a pattern, so that the message names the character."""
    if isinstance(value, str):
        _no_control(value)
    return value


def _absolute_path(value: str) -> str:
    path = PurePosixPath(value)
    if not path.is_absolute():
        raise ValueError(f"{value!r} is not an absolute path")
    if ".." in path.parts:
        raise ValueError(f"{value!r} contains '..'")
    return value


def _image_pinned(value: str) -> str:
    if not IMAGE_RE.fullmatch(value):
        if "@sha256:" not in value:
            raise ValueError(
                f"{value!r} is not pinned by digest; use NAME[:TAG]@sha256:<64 hex> "
                "(find it with `podman image inspect --format '{{.Digest}}' IMAGE`)"
            )
        raise ValueError(f"{value!r} is not a valid NAME[:TAG]@sha256:<64 lowercase hex> reference")
    return value


UnitStr = Annotated[str, AfterValidator(_no_control)]


def _scalar_to_text(value: object) -> object:
    # `--set container.env.USE_REPLAYSSM=0` and `FOO: 1` in YAML give numbers; an environment is text
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    return value


# json_schema_input_type: what the recipe's JSON Schema (`rigctl schema recipe`) lets an editor accept
EnvValue = Annotated[str, BeforeValidator(_scalar_to_text, json_schema_input_type=str | int | float | bool),
                     AfterValidator(_no_control)]
NonEmptyStr = Annotated[str, Field(min_length=1), AfterValidator(_no_control)]
HostPath = Annotated[str, Field(min_length=1), AfterValidator(_no_control), AfterValidator(_absolute_path)]
ContainerPath = HostPath
Port = Annotated[int, Field(ge=1, le=65535)]
# a GPU by NVML index (YAML gives an int) or by UUID; kept as text either way
GpuId = Annotated[
    str,
    BeforeValidator(_no_control_before),
    BeforeValidator(lambda v: str(v) if isinstance(v, int) and not isinstance(v, bool) else v,
                    json_schema_input_type=Annotated[int, Field(ge=0, le=99)]
                    | Annotated[str, Field(pattern=r"^(\d{1,2}|GPU-[0-9a-fA-F-]{36}|MIG-[0-9a-fA-F-]{36})$")]),
    Field(pattern=r"^(\d{1,2}|GPU-[0-9a-fA-F-]{36}|MIG-[0-9a-fA-F-]{36})$"),
]


def _recipe_name(value: str) -> str:
    problem = recipe_name_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


RecipeName = Annotated[str, AfterValidator(_recipe_name)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
ImageRef = Annotated[str, AfterValidator(_no_control), AfterValidator(_image_pinned)]
Sha256 = Annotated[str, BeforeValidator(_no_control_before), Field(pattern=r"^[0-9a-f]{64}$")]
DriverVersion = Annotated[str, Field(pattern=r"^\d+(\.\d+){1,2}$")]
ComputeCapability = Annotated[str, BeforeValidator(_no_control_before), Field(pattern=r"^\d+\.\d+$")]


class _Closed(BaseModel):
    """Frozen, no unknown key, and no line break in any key."""

    # defer_build: a model's validator is built when it first validates, not when the class is created.
    # A command validates Recipe (whose validator covers every nested model) and rarely a part alone, so
    # building one validator per class at import was start-up time spent on validators never used.
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False, defer_build=True)

    # Line breaks are refused in EVERY string of a recipe -- keys included -- before any other check,
    # so a field with its own pattern still names the character, and no new field can forget it.
    @model_validator(mode="before")
    @classmethod
    def _keys_without_control(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for key in data:
                if isinstance(key, str):
                    _refuse_control(key, False, f"key {key!r} ")
        return data


class Strict(_Closed):
    """Every model of the recipe: also no line break in any value, whatever the field's type. (A member
    of a tagged union derives from _Closed instead: pydantic allows no before-validator on the tag; its
    other strings are UnitStr, which refuses the same characters.)"""

    @field_validator("*", mode="before")
    @classmethod
    def _values_without_control(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        _refuse_control(value, keys=field is None or not _holds_model(field.annotation))
        tag = field.discriminator if field else None
        if isinstance(tag, str) and isinstance(value, Mapping):  # the union member cannot check its own tag
            _refuse_control(value.get(tag), False, f"{tag}: ")
        return value


# --- checkpoint -------------------------------------------------------------------------------------


MAX_SHARDS = 100_000  # the largest published checkpoints have a few thousand
# a shard_pattern field: {index} or {count}, optionally zero-padded to a width below 100 ({index:05d})
_SHARD_FIELD = re.compile(r"(?:index|count)")
_SHARD_SPEC = re.compile(r"(?:0?[1-9][0-9]?)?d?")


def _shard_pattern(value: str) -> str:
    """Only {index}/{count} fields, of a small width: `{index:0999999999d}` would build a gigabyte
    string. That the names it gives are plain file names is checked with the shard count."""
    try:
        fields = list(string.Formatter().parse(value))
    except ValueError as exc:
        raise ValueError(f"shard_pattern cannot be formatted: {exc}") from None
    for _text, name, spec, conversion in fields:
        if name is None:
            continue
        if not _SHARD_FIELD.fullmatch(name) or conversion or not _SHARD_SPEC.fullmatch(spec or ""):
            shown = f"{{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}}"
            raise ValueError(f"shard_pattern field {shown[:40]!r} is not {{index}} or {{count}}, "
                             "optionally with a width below 100 such as {index:05d}")
    return value


class CheckpointFormat(StrEnum):
    EXL3 = "exl3"
    NVFP4 = "nvfp4"
    SAFETENSORS = "safetensors"  # plain BF16/FP16/FP8 Hugging Face checkpoint
    GGUF = "gguf"


EXL3_VARIANTS = {"TR3", "K3", "standard"}
NVFP4_VARIANTS = {"modelopt", "compressed-tensors"}


class License(Strict):
    id: NonEmptyStr
    acceptance_required: bool = False
    url: UnitStr | None = None
    note: UnitStr | None = None


_Dim = Annotated[int, Field(ge=1, le=1_048_576)]
_Layers = Annotated[list[Annotated[int, Field(ge=0, le=4096)]], Field(max_length=4096)]


class LinearAttnConfig(Strict):
    """Kimi-style linear attention (KDA) as its config.json names it: which layers are KDA, which MLA."""

    kda_layers: _Layers
    full_attn_layers: _Layers
    num_heads: _Dim
    head_dim: _Dim
    short_conv_kernel_size: int = Field(default=4, ge=1, le=64)


class ModelConfig(Strict):
    """The few fields of the model's config.json that size its memory, pinned in the recipe so preflight's
    gpu-fit can plan before the checkpoint is downloaded. Names are config.json's own: copy them from it."""

    model_type: NonEmptyStr | None = None
    torch_dtype: Literal["bfloat16", "float16", "float32"] | None = None
    num_hidden_layers: Annotated[int, Field(ge=1, le=4096)]
    hidden_size: _Dim | None = None
    intermediate_size: _Dim | None = None
    moe_intermediate_size: _Dim | None = None
    num_experts: _Dim | None = None
    num_experts_per_tok: _Dim | None = None
    vocab_size: _Dim | None = None
    num_attention_heads: _Dim | None = None
    num_key_value_heads: _Dim | None = None
    head_dim: _Dim | None = None
    max_position_embeddings: _Dim | None = None
    sliding_window: _Dim | None = None
    layer_types: Annotated[list[Literal["full_attention", "sliding_attention", "linear_attention"]],
                           Field(max_length=4096)] | None = None
    full_attention_interval: _Dim | None = None
    kv_lora_rank: _Dim | None = None
    qk_rope_head_dim: Annotated[int, Field(ge=0, le=1_048_576)] | None = None
    index_head_dim: _Dim | None = None
    index_topk: _Dim | None = None
    index_kpool: _Dim | None = None
    linear_num_key_heads: _Dim | None = None
    linear_num_value_heads: _Dim | None = None
    linear_key_head_dim: _Dim | None = None
    linear_value_head_dim: _Dim | None = None
    linear_conv_kernel_dim: _Dim | None = None
    linear_attn_config: LinearAttnConfig | None = None

    @model_validator(mode="after")
    def _layer_lists_fit(self) -> ModelConfig:
        if self.layer_types is not None and len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(f"layer_types lists {len(self.layer_types)} layers but num_hidden_layers is "
                             f"{self.num_hidden_layers}")
        lin = self.linear_attn_config
        if lin is not None and len(lin.kda_layers) + len(lin.full_attn_layers) != self.num_hidden_layers:
            raise ValueError(f"linear_attn_config names {len(lin.kda_layers)} KDA + {len(lin.full_attn_layers)} "
                             f"full-attention layers but num_hidden_layers is {self.num_hidden_layers}")
        return self


class Checkpoint(Strict):
    format: CheckpointFormat
    variant: UnitStr | None = None
    bits: float | None = Field(default=None, gt=0, le=32)
    source: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+(@[A-Za-z0-9._/-]+)?$")]
    path: HostPath
    shards: int = Field(ge=1, le=MAX_SHARDS)
    shard_pattern: Annotated[UnitStr, AfterValidator(_shard_pattern)] = "model-{index:05d}-of-{count:05d}.safetensors"
    total_bytes: int | None = Field(default=None, ge=1, description="exact size of all shards together")
    approx_bytes: int | None = Field(
        default=None, ge=1, description="when only an approximate size is published (checked within 2%)"
    )
    sha256: dict[UnitStr, Sha256] | None = None
    license: License
    config: ModelConfig | None = Field(default=None, description="the model's config.json fields that size its "
                                       "memory (gpu-fit plans from them before the download)")

    @model_validator(mode="after")
    def _variant_fits_format(self) -> Checkpoint:
        if (self.total_bytes is None) == (self.approx_bytes is None):
            raise ValueError("give exactly one of total_bytes (exact) or approx_bytes")
        if self.format is CheckpointFormat.EXL3 and self.variant not in EXL3_VARIANTS:
            raise ValueError(f"exl3 variant must be one of {sorted(EXL3_VARIANTS)}, not {self.variant!r}")
        if self.format is CheckpointFormat.NVFP4 and self.variant not in NVFP4_VARIANTS:
            raise ValueError(f"nvfp4 variant must be one of {sorted(NVFP4_VARIANTS)}, not {self.variant!r}")
        if self.sha256 is not None and len(self.sha256) != self.shards:
            raise ValueError(f"sha256 manifest lists {len(self.sha256)} files but shards is {self.shards}")
        longest = self.shard_pattern.format(index=self.shards, count=self.shards)
        if "/" in longest or longest in {"", ".", ".."}:
            raise ValueError(f"shard_pattern gives {longest[:60]!r}, not a file name inside checkpoint.path")
        if len(longest.encode()) > 255:
            raise ValueError(f"shard_pattern gives file names of {len(longest.encode())} bytes; at most 255 fit")
        return self

    def shard_names(self) -> list[str]:
        return [self.shard_pattern.format(index=i, count=self.shards) for i in range(1, self.shards + 1)]


# --- engine -----------------------------------------------------------------------------------------


class EngineKind(StrEnum):
    VLLM = "vllm"
    TABBYAPI = "tabbyapi"
    SGLANG = "sglang"


class Engine(Strict):
    kind: EngineKind
    command: list[UnitStr] = Field(default_factory=empty_list,
                                   description="entrypoint override; empty keeps the image's")
    args: list[UnitStr] = Field(default_factory=empty_list)
    env: dict[EnvName, EnvValue] = Field(default_factory=dict)
    port: Port
    health_path: Annotated[str, Field(pattern=defaults.HEALTH_PATH_PATTERN)] = defaults.HEALTH_PATH
    version: Annotated[str, Field(pattern=r"^v?\d{1,4}\.\d{1,4}(\.\d{1,6})*([.+-]?[A-Za-z0-9.]{1,32})?$",
                                  max_length=48)] | None = Field(
        default=None, description="the engine's version in the image (e.g. vLLM 0.11.0): the memory plan models "
                                  "what that version subtracts; unset, it plans for the versions it knows")
    pin_kv_cache: bool = Field(
        default=False, description="vLLM: size the KV cache as the last boot of these settings, image and GPU "
                                   "measured it (rendered as --kv-cache-memory-bytes from that boot's receipt)")


# --- GPUs -------------------------------------------------------------------------------------------


class GpuLayout(Strict):
    count: int = Field(ge=0, le=64, description="0 means the recipe needs no GPU")
    tensor_parallel: int = Field(default=1, ge=1)
    pipeline_parallel: int = Field(default=1, ge=1)
    data_parallel: int = Field(default=1, ge=1)
    decode_context_parallel: int = Field(default=1, ge=1)
    expert_parallel: bool = False
    products: list[NonEmptyStr] = Field(default_factory=empty_list, description="accepted nvmlDeviceGetName strings")
    min_memory_mib: int = Field(default=0, ge=0)
    compute_capability: list[ComputeCapability] = Field(default_factory=empty_list)
    min_driver: DriverVersion | None = None
    allow_mixed: bool = Field(default=False, description="allow different products (e.g. Max-Q + Workstation)")
    select: list[GpuId] | None = Field(default=None, description="explicit GPU indices or UUIDs")

    @model_validator(mode="after")
    def _sizes_fit(self) -> GpuLayout:
        if self.count == 0:
            if self.products or self.select:
                raise ValueError("count is 0 (no GPU) but products or select are given")
            return self
        world = self.tensor_parallel * self.pipeline_parallel * self.data_parallel
        if world != self.count:
            raise ValueError(
                f"tensor_parallel ({self.tensor_parallel}) x pipeline_parallel ({self.pipeline_parallel}) "
                f"x data_parallel ({self.data_parallel}) = {world}, but count is {self.count}"
            )
        if self.tensor_parallel % self.decode_context_parallel:
            raise ValueError(
                f"decode_context_parallel ({self.decode_context_parallel}) must divide "
                f"tensor_parallel ({self.tensor_parallel}): it reuses the tensor-parallel GPUs"
            )
        if self.select is not None and len(self.select) != self.count:
            raise ValueError(f"select names {len(self.select)} GPUs but count is {self.count}")
        return self


# --- speculative decoding ----------------------------------------------------------------------------


class SpecNone(_Closed):
    method: Literal["none"] = "none"


class SpecMtp(_Closed):
    method: Literal["mtp"]
    num_speculative_tokens: int = Field(default=1, ge=1, le=16)
    adaptive: bool = False


class DraftModel(Strict):
    source: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+(@[A-Za-z0-9._/-]+)?$")]
    path: HostPath
    total_bytes: int = Field(ge=1)
    shards: int = Field(default=1, ge=1, le=MAX_SHARDS)
    sha256: dict[UnitStr, Sha256] | None = None
    license: License


class SpecDraft(_Closed):
    method: Literal["draft"]
    name: NonEmptyStr = Field(description="draft family, e.g. dflash2, eagle3")
    num_speculative_tokens: int = Field(default=4, ge=1, le=32)
    draft: DraftModel


Speculative = Annotated[SpecNone | SpecMtp | SpecDraft, Field(discriminator="method")]


# --- container and service ---------------------------------------------------------------------------


class Volume(Strict):
    host: HostPath
    container: ContainerPath
    read_only: bool = True
    selinux_relabel: bool = False


class Secret(Strict):
    """A podman secret (`podman secret create NAME -`), exposed to the engine as an env var."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    env: EnvName


_SIZE = r"^[1-9][0-9]*[bkmgBKMG]?$"


def http_url(address: str, port: int) -> str:
    """``http://HOST:PORT`` for a server published on ``address``: ``util.publish.client_url``, the one rule
    (an unspecified address is reached over the loopback of its family, an IPv6 address is bracketed)."""
    from rigctl.util.publish import client_url  # noqa: PLC0415 - only for a URL; the model loads on every command

    return client_url(address, port)


class Publish(Strict):
    address: Annotated[str, Field(pattern=r"^[0-9a-fA-F:.]+$")] = "127.0.0.1"
    port: Port


class Container(Strict):
    name: RecipeName | None = Field(default=None, description="defaults to rigctl-<recipe name>")
    ipc: Literal["private", "shareable", "host"] = "private"
    shm_size: Annotated[str, Field(pattern=_SIZE)] | None = None
    volumes: list[Volume] = Field(default_factory=empty_list)
    env: dict[EnvName, EnvValue] = Field(default_factory=dict)
    secrets: list[Secret] = Field(default_factory=empty_list)
    publish: Publish | None = None
    init: bool = True
    extra_podman_args: list[UnitStr] = Field(default_factory=empty_list)
    engine_cache: bool = Field(
        default=True, description="keep the engine's compile and autotune caches (vLLM, torch inductor, Triton, "
                                  "FlashInfer) in a directory per image digest and GPU that outlives the "
                                  "container, so a restart is warm")

    @model_validator(mode="after")
    def _ipc_and_shm(self) -> Container:
        if self.ipc == "host" and self.shm_size is not None:
            raise ValueError(
                f"ipc: host together with shm_size: {self.shm_size} is rejected by podman at start: "
                f"{PODMAN_IPC_SHM_ERROR!r}; drop shm_size (host IPC already shares the host's /dev/shm)"
            )
        for arg in self.extra_podman_args:
            if arg.split("=", 1)[0] in {"--restart", "--rm", "--replace", "-d", "--detach"}:
                raise ValueError(f"extra_podman_args may not contain {arg!r}: quadlet and systemd own it")
        if self.ipc == "host" and self.shm_given is not None:  # --ipc in extra_podman_args: preflight's ipc-shm
            raise ValueError(f"ipc: host with {self.shm_given}: {PODMAN_IPC_SHM_ERROR!r}")
        return self

    @property
    def extra_options(self) -> RunCommand:
        """extra_podman_args as podman reads them (``rigctl.podman_args``)."""
        return podman_args(list(self.extra_podman_args))

    @property
    def ipc_mode(self) -> str:
        """The IPC mode the container gets: ``ipc``, unless extra_podman_args says --ipc (podman reads the last)."""
        said = self.extra_options.values("--ipc")
        return said[-1] if said else self.ipc

    @property
    def shm_given(self) -> str | None:
        """Where an explicit /dev/shm size is given (``shm_size``, or --shm-size in extra_podman_args), in
        words; None: podman's default."""
        if self.shm_size is not None:
            return f"shm_size: {self.shm_size}"
        said = self.extra_options.values("--shm-size")
        return f"--shm-size {said[-1]} in extra_podman_args" if said else None


class Service(Strict):
    restart: Literal["always"] = Field(
        default="always",
        description="always: a vLLM engine crash can exit 0, which on-failure would leave down",
    )
    restart_sec: int = Field(default=defaults.RESTART_SEC, ge=0, le=3600)
    warmup_budget_s: int = Field(default=defaults.WARMUP_BUDGET_S, ge=10, le=86400,
                                 description="becomes TimeoutStartSec")
    stall_budget_s: int = Field(default=600, ge=5, le=86400, description="no output for this long is a stall")
    stop_timeout_s: int = Field(default=defaults.STOP_TIMEOUT_S, ge=1, le=3600)
    liveness_window_s: int = Field(
        default=defaults.LIVENESS_WINDOW_S, ge=0, le=3600,
        description="requests running and no new token for this long: the health check fails and the engine "
                    f"is restarted (engines with token counters: vLLM); 0 turns it off, else at least "
                    f"{defaults.LIVENESS_MIN_WINDOW_S}")

    @field_validator("liveness_window_s")
    @classmethod
    def _window_zero_or_long_enough(cls, value: int) -> int:
        if 0 < value < defaults.LIVENESS_MIN_WINDOW_S:
            raise ValueError(f"give 0 (off) or at least {defaults.LIVENESS_MIN_WINDOW_S} s: the health check needs "
                             "that long for its retries")
        return value

    @property
    def unit_stop_timeout_s(self) -> int:
        """The unit's TimeoutStopSec (quadlet, podman kube): the engine's stop timeout and a grace after it."""
        return self.stop_timeout_s + defaults.STOP_GRACE_S

    @property
    def stop_wait_s(self) -> float:
        """How long rigctl waits for `systemctl stop` of this unit (``defaults.stop_wait_s``)."""
        return defaults.stop_wait_s(self.stop_timeout_s)


# --- verification expectations -----------------------------------------------------------------------


class SmokePrompt(Strict):
    prompt: NonEmptyStr
    expect_contains: NonEmptyStr
    max_tokens: int = Field(default=32, ge=1, le=4096)
    chat: bool = False


def _default_smoke() -> list[SmokePrompt]:
    return [SmokePrompt(prompt="The capital of France is", expect_contains="Paris")]


class NeedleSettings(Strict):
    context: int | None = Field(default=None, ge=256, description="defaults to the recipe's context length")
    depths: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: [0.05, 0.25, 0.5, 0.75, 0.95, 0.99]
    )
    answer_budget: int = Field(default=64, ge=8, le=4096)


class SoakSettings(Strict):
    concurrency: int = Field(default=16, ge=1, le=1024)
    requests: int = Field(default=32, ge=1, le=100000)
    prefix_tokens: int = Field(default=2048, ge=1)
    max_tokens: int = Field(default=256, ge=1)
    runaway_factor: float = Field(default=4.0, gt=1)
    timeout_s: int = Field(default=900, ge=10)


class Verification(Strict):
    smoke: list[SmokePrompt] = Field(default_factory=_default_smoke, min_length=1)
    needle: NeedleSettings = Field(default_factory=NeedleSettings)
    soak: SoakSettings = Field(default_factory=SoakSettings)
    request_timeout_s: int = Field(default=defaults.REQUEST_TIMEOUT_S, ge=1, le=3600)


# --- known issues ----------------------------------------------------------------------------------


class CrashSignature(Strict):
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    pattern: NonEmptyStr = Field(description="Python regular expression searched in the engine output")
    meaning: NonEmptyStr
    remedy: NonEmptyStr
    link: UnitStr | None = None

    @model_validator(mode="after")
    def _compiles(self) -> CrashSignature:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"pattern does not compile: {exc}") from None
        return self


class KnownBad(Strict):
    """A combination known to fail. Every given condition must hold for it to match; conditions on the
    recipe are decided at load time, conditions on the host (compute capability) at preflight."""

    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    checkpoint_formats: list[CheckpointFormat] | None = None
    engine_kinds: list[EngineKind] | None = None
    attention_backends: list[NonEmptyStr | None] | None = Field(
        default=None, description="null in the list stands for the engine's default backend"
    )
    compute_capabilities: list[ComputeCapability] | None = None
    problem: NonEmptyStr
    remedy: NonEmptyStr
    link: UnitStr | None = None


class KnownIssues(Strict):
    signatures: list[CrashSignature] = Field(default_factory=empty_list)
    bad_combinations: list[KnownBad] = Field(default_factory=empty_list)


class ImageDeclares(Strict):
    """What the pinned image holds, said by the recipe for an image whose config declares nothing
    (no CUDA_VERSION / NV_CUDA_* / NCCL_VERSION in its Env): preflight judges these where neither the local
    image nor its registry's config says them."""

    cuda: Annotated[str, Field(pattern=r"^\d{1,3}\.\d{1,3}(\.\d{1,4})?$")] | None = Field(
        default=None, description='the CUDA the image was built for, e.g. "12.8" (judged against the driver\'s)')
    nccl: Annotated[str, Field(pattern=r"^\d{1,3}\.\d{1,3}\.\d{1,4}$")] | None = Field(
        default=None, description='the NCCL release inside the image, e.g. "2.26.2" (judged against the '
                                  "known-bad table)")


# --- the recipe ------------------------------------------------------------------------------------


class Recipe(Strict):
    name: RecipeName
    description: NonEmptyStr
    family: NonEmptyStr
    served_name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")]
    checkpoint: Checkpoint
    image: ImageRef
    # left out of a dump while unset, so the digest of a recipe that does not use it stays as it was
    image_declares: ImageDeclares | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="the image's CUDA and NCCL, for an image whose config declares neither: used where the local "
                    "image's Env and its registry's config say nothing")
    engine: Engine
    gpus: GpuLayout
    attention_backend: UnitStr | None = None
    context_length: int = Field(ge=256, le=defaults.MAX_CONTEXT)
    speculative: Speculative = Field(default_factory=SpecNone)
    container: Container = Field(default_factory=Container)
    service: Service = Field(default_factory=Service)
    verify: Verification = Field(default_factory=Verification)
    known_issues: KnownIssues = Field(default_factory=KnownIssues)

    @model_validator(mode="after")
    def _consistent(self) -> Recipe:
        mounts = {v.container for v in self.container.volumes}
        if self.checkpoint.path not in {v.host for v in self.container.volumes}:
            raise ValueError(
                f"checkpoint.path {self.checkpoint.path} is not mounted: add it to container.volumes"
            )
        if len(mounts) != len(self.container.volumes):
            raise ValueError("container.volumes mounts two host paths at the same container path")
        if self.verify.needle.context is not None and self.verify.needle.context > self.context_length:
            raise ValueError(
                f"verify.needle.context {self.verify.needle.context} exceeds context_length {self.context_length}"
            )
        return self

    @property
    def container_name(self) -> str:
        return self.container.name or default_container(self.name)

    @property
    def publish(self) -> Publish:
        """Where the endpoint is published; unset means the engine's own port on loopback."""
        return self.container.publish or Publish(port=self.engine.port)

    @property
    def base_url(self) -> str:
        """Where this host reaches the engine (``http://127.0.0.1:8000``): what `up` waits on and records,
        `verify` and `status` ask, and the dry run shows. The one place it is derived."""
        return http_url(self.publish.address, self.publish.port)

    @property
    def image_digest(self) -> str:
        match = IMAGE_RE.fullmatch(self.image)
        assert match is not None  # guaranteed by ImageRef
        return match.group("digest")

    @property
    def image_name(self) -> str:
        match = IMAGE_RE.fullmatch(self.image)
        assert match is not None
        return match.group("name")

    def checkpoint_mount(self) -> Volume:
        return next(v for v in self.container.volumes if v.host == self.checkpoint.path)

    def recipe_known_bad(self) -> list[KnownBad]:
        """Known-bad combinations whose recipe-side conditions all hold (host-side ones not yet decided)."""
        hits = []
        for bad in self.known_issues.bad_combinations:
            if bad.checkpoint_formats is not None and self.checkpoint.format not in bad.checkpoint_formats:
                continue
            if bad.engine_kinds is not None and self.engine.kind not in bad.engine_kinds:
                continue
            if bad.attention_backends is not None and self.attention_backend not in bad.attention_backends:
                continue
            hits.append(bad)
        return hits

    def licenses(self) -> list[tuple[str, License]]:
        """(what, license) for the checkpoint and any draft model."""
        found = [("checkpoint", self.checkpoint.license)]
        if isinstance(self.speculative, SpecDraft):
            found.append(("speculative.draft", self.speculative.draft.license))
        return found
