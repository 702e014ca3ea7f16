"""The engine's command line, derived from the recipe's structured fields.

Each engine gets the flags its own server parses (vLLM's ``vllm serve`` / OpenAI API server,
TabbyAPI's config-mirroring argparse, SGLang's ``launch_server``); the recipe's ``engine.args`` are
appended after them. A flag rigctl derives may not be repeated in ``engine.args``: argparse would
silently take the last one, and the recipe's structured value (which preflight and verify rely on)
would no longer be what the engine runs with.

What rigctl knows about each engine is one row of ``ENGINES``, keyed by engine kind: the function that
spells its flags, and the launcher that replaces the image's command. A kind without a row is refused
(``UnknownEngineError``): giving it another engine's flags would start a server that exits on them, or
worse, runs with settings nobody chose. A new engine is one function plus one row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from rigctl.recipe.model import EngineKind, GpuLayout, Recipe, SpecDraft, SpecMtp
from rigctl.render.escape import RenderError


@dataclass(frozen=True)
class EngineLine:
    """What the unit runs: an entrypoint override (or None), the argv after it, extra environment."""

    entrypoint: list[str] | None
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class UnknownEngineError(RenderError):
    """The recipe names an engine kind that ``ENGINES`` has no row for."""

    code = "unknown-engine"


def _mount_of(recipe: Recipe, host_path: str, what: str) -> str:
    for volume in recipe.container.volumes:
        if volume.host == host_path:
            return volume.container
    raise RenderError(
        f"{what} {host_path} is not mounted into the container",
        fix=f"add a container.volumes entry with host: {host_path}",
    )


def _parallel_sizes(gpus: GpuLayout, tensor: str, pipeline: str, data: str) -> list[str]:
    """The engine's spelling of the tensor, pipeline and data parallel sizes, in that order: tensor
    whenever the recipe uses GPUs, the other two only when above 1 (the engines' defaults)."""
    argv = [tensor, str(gpus.tensor_parallel)] if gpus.count > 0 else []
    for flag, size in ((pipeline, gpus.pipeline_parallel), (data, gpus.data_parallel)):
        if size > 1:
            argv += [flag, str(size)]
    return argv


def _vllm(recipe: Recipe, notes: list[str]) -> tuple[list[str], dict[str, str]]:
    gpus = recipe.gpus
    argv = [
        "--model", recipe.checkpoint_mount().container,
        "--served-model-name", recipe.served_name,
    ]
    argv += _parallel_sizes(gpus, "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size")
    if gpus.decode_context_parallel > 1:
        argv += ["--decode-context-parallel-size", str(gpus.decode_context_parallel)]
    if gpus.expert_parallel:
        argv.append("--enable-expert-parallel")
    argv += ["--max-model-len", str(recipe.context_length), "--host", "0.0.0.0", "--port", str(recipe.engine.port)]
    spec = recipe.speculative
    if isinstance(spec, SpecMtp):
        mtp = {"method": "mtp", "num_speculative_tokens": spec.num_speculative_tokens}
        argv += ["--speculative-config", _json(mtp)]
        if spec.adaptive:
            notes.append(
                "speculative.adaptive has no field in vLLM's --speculative-config; it is not passed. "
                "If your engine build has an adaptive switch, add it to engine.args or engine.env"
            )
    elif isinstance(spec, SpecDraft):
        draft_path = _mount_of(recipe, spec.draft.path, "speculative.draft.path")
        argv += ["--speculative-config", _json({
            "method": spec.name, "model": draft_path, "num_speculative_tokens": spec.num_speculative_tokens,
        })]
    env: dict[str, str] = {}
    if recipe.attention_backend is not None:
        env["VLLM_ATTENTION_BACKEND"] = recipe.attention_backend
    return argv, env


def _sglang(recipe: Recipe, notes: list[str]) -> tuple[list[str], dict[str, str]]:
    gpus = recipe.gpus
    if gpus.decode_context_parallel > 1:
        raise RenderError(
            "SGLang has no decode-context-parallel option (gpus.decode_context_parallel > 1)",
            fix="set gpus.decode_context_parallel to 1, or use engine kind vllm",
        )
    argv = ["--model-path", recipe.checkpoint_mount().container, "--served-model-name", recipe.served_name]
    argv += _parallel_sizes(gpus, "--tp-size", "--pp-size", "--dp-size")
    if gpus.expert_parallel:
        argv += ["--ep-size", str(gpus.tensor_parallel)]
    argv += ["--context-length", str(recipe.context_length), "--host", "0.0.0.0", "--port", str(recipe.engine.port)]
    if recipe.attention_backend is not None:
        argv += ["--attention-backend", recipe.attention_backend]
    spec = recipe.speculative
    if isinstance(spec, SpecMtp | SpecDraft):
        steps = spec.num_speculative_tokens
        algorithm = "NEXTN" if isinstance(spec, SpecMtp) else spec.name.upper()
        argv += ["--speculative-algorithm", algorithm]
        if isinstance(spec, SpecDraft):
            argv += ["--speculative-draft-model-path", _mount_of(recipe, spec.draft.path, "speculative.draft.path")]
        # chain drafting (top-k 1): steps+1 tokens verified per step
        argv += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", str(steps + 1)]
    return argv, {}


def _tabbyapi(recipe: Recipe, notes: list[str]) -> tuple[list[str], dict[str, str]]:
    gpus = recipe.gpus
    if gpus.pipeline_parallel > 1 or gpus.data_parallel > 1 or gpus.decode_context_parallel > 1:
        raise RenderError(
            "TabbyAPI supports tensor parallelism only (gpus.pipeline_parallel, data_parallel and "
            "decode_context_parallel must be 1)",
            fix="set them to 1, or use engine kind vllm",
        )
    model = PurePosixPath(recipe.checkpoint_mount().container)
    argv = [
        "--host", "0.0.0.0", "--port", str(recipe.engine.port),
        "--model-dir", str(model.parent), "--model-name", model.name,
        "--max-seq-len", str(recipe.context_length),
    ]
    if gpus.tensor_parallel > 1:
        argv += ["--tensor-parallel", "true"]
    spec = recipe.speculative
    if isinstance(spec, SpecMtp):
        argv += ["--draft-mode", "mtp", "--draft-num-tokens", str(spec.num_speculative_tokens)]
    elif isinstance(spec, SpecDraft):
        draft = PurePosixPath(_mount_of(recipe, spec.draft.path, "speculative.draft.path"))
        argv += ["--draft-mode", "model", "--draft-model-dir", str(draft.parent),
                 "--draft-model-name", draft.name, "--draft-num-tokens", str(spec.num_speculative_tokens)]
    if model.name != recipe.served_name:
        notes.append(
            f"engine tabbyapi names the model after its directory ({model.name!r}), not served_name "
            f"({recipe.served_name!r}); mount the checkpoint at /models/{recipe.served_name} to make them agree"
        )
    if recipe.attention_backend is not None:
        notes.append(f"engine tabbyapi has no attention backend switch; attention_backend "
                     f"{recipe.attention_backend!r} is not passed")
    if gpus.expert_parallel:
        notes.append("engine tabbyapi has no expert-parallel switch; gpus.expert_parallel is not passed")
    return argv, {}


def _json(data: dict[str, object]) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=False, allow_nan=False)


@dataclass(frozen=True)
class EngineCommand:
    """One row of the engine table."""

    flags: Callable[[Recipe, list[str]], tuple[list[str], dict[str, str]]]  # (recipe, notes) -> argv, environment
    launcher: tuple[str, ...] = ()  # replaces the image's command when engine.command is empty; () keeps it


ENGINES: dict[EngineKind, EngineCommand] = {
    EngineKind.VLLM: EngineCommand(_vllm),
    EngineKind.TABBYAPI: EngineCommand(_tabbyapi),
    EngineKind.SGLANG: EngineCommand(_sglang, launcher=("python3", "-m", "sglang.launch_server")),
}


def engine_for(kind: EngineKind) -> EngineCommand:
    """The table's row for ``kind``; a kind without one is refused, never given another engine's flags."""
    engine = ENGINES.get(kind)
    if engine is None:
        raise UnknownEngineError(
            f"engine.kind '{kind}': rigctl has no flags for this engine (it knows {', '.join(ENGINES)})",
            fix=f"set engine.kind to one of {', '.join(ENGINES)}",
        )
    return engine


def _flag_names(argv: list[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in argv if a.startswith("--")}


def engine_line(recipe: Recipe) -> EngineLine:
    engine = engine_for(recipe.engine.kind)
    notes: list[str] = []
    derived, env = engine.flags(recipe, notes)
    clash = sorted(_flag_names(derived) & _flag_names(list(recipe.engine.args)))
    if clash:
        raise RenderError(
            f"engine.args repeats {', '.join(clash)}, which rigctl derives from the recipe's structured fields "
            f"(context_length, gpus, served_name, engine.port, speculative, checkpoint)",
            fix="drop them from engine.args and set the structured field instead",
        )
    entrypoint: list[str] | None = None
    head: list[str] = []
    if recipe.engine.command:
        entrypoint = [recipe.engine.command[0]]
        head = list(recipe.engine.command[1:])
    elif engine.launcher:
        head = list(engine.launcher)
        notes.append(f"engine {recipe.engine.kind}: the image's command is replaced by `{' '.join(engine.launcher)}`")
    return EngineLine(entrypoint, [*head, *derived, *recipe.engine.args], env, notes)
