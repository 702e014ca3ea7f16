"""Who can reach the model: a port published beyond loopback, or an engine listening on every address,
with no key configured, is an open model on the network."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rigctl.doctor.edits import Edit, ReplaceWord
from rigctl.doctor.rules.context import Hit, RuleContext, entry_with
from rigctl.host.serving import (
    ENGINE_AUTH_BY_DEFAULT,
    ENGINE_BINDS_ALL_BY_DEFAULT,
    ENGINE_HOST_OPTIONS,
    ServingSpec,
)
from rigctl.severity import Severity
from rigctl.util.publish import loopback_only, parse_publish, spell_publish

_AUTH_ENV = re.compile(r"(^|_)API_(KEY|KEYS|TOKEN|TOKENS)$")
_AUTH_ARGS = ("--api-key", "--api-keys", "--api-key-file", "--api-token")


def split_publish(spec: str) -> tuple[str | None, str, str, str]:
    """``[[ip:][hostPort]:]containerPort[/proto]`` -> (ip or None, host port, container port, /proto), the ip
    as podman writes it (an IPv6 one bracketed): ``util.publish.parse_publish``, the one reading of it."""
    published = parse_publish(spec)
    return published.shown_address, published.host_port, published.container_port, published.proto


def _engine_host(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in ENGINE_HOST_OPTIONS:
            return value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return None


def _has_auth(spec: ServingSpec) -> bool:
    if spec.engine in ENGINE_AUTH_BY_DEFAULT and "--disable-auth" not in spec.engine_args:
        return True
    if any(a.split("=", 1)[0] in _AUTH_ARGS for a in spec.engine_args):
        return True
    return any(_AUTH_ENV.search(name) for name in spec.env_names)


def published(ctx: RuleContext) -> list[Hit]:
    spec = ctx.spec
    exposed: list[str] = []
    edits: list[Edit] = []
    for publish in spec.publish:
        ip, host_port, container_port, suffix = split_publish(publish)
        if ip is not None and loopback_only(ip):
            continue
        exposed.append(f"port {publish} is published on {ip or 'every address'}")
        local = spell_publish("127.0.0.1", host_port, container_port, suffix)
        entry = entry_with(ctx.unit.merged, "Container", "PublishPort", publish) or entry_with(
            ctx.unit.merged, *ctx.run_keys, publish
        )
        if entry is not None:
            edits.append(ReplaceWord(entry, publish, local))
    host_net = any(n == "host" for n in spec.network)
    if spec.runner == "engine" or host_net:
        bind = _engine_host(spec.engine_args)
        default_all = bind is None and spec.engine in ENGINE_BINDS_ALL_BY_DEFAULT
        if (bind is not None and not loopback_only(bind)) or default_all:
            where = "the host network" if host_net else "the host"
            exposed.append(
                f"{spec.engine or 'the engine'} listens on {bind or 'every address (its default)'} on {where}"
            )
    if not exposed or _has_auth(spec):
        return []
    severity = Severity.FAIL
    note = ""
    if spec.env_files:
        severity = Severity.WARN
        note = f" (an API key may come from EnvironmentFile {', '.join(spec.env_files)}, which doctor does not read)"
    auto = bool(edits) and len(edits) == len(exposed)
    if spec.runner == "engine" or host_net:
        fix = (
            f"bind {spec.engine or 'the engine'} to loopback (--host 127.0.0.1) behind an authenticating proxy, "
            "or give it a key (--api-key, or VLLM_API_KEY from a secret)"
        )
    else:
        fix = (
            "publish on loopback (PublishPort=127.0.0.1:PORT:PORT, or -p 127.0.0.1:PORT:PORT) behind an "
            "authenticating proxy, or give the engine a key (vLLM: Secret=NAME,type=env,target=VLLM_API_KEY)"
        )
    first = entry_with(ctx.unit.merged, "Container", "PublishPort", "") if spec.runner == "quadlet" else None
    return [Hit(
        f"{'; '.join(exposed)}, and no authentication is configured (no --api-key, no *_API_KEY "
        f"environment or secret){note}: anyone on the network can use the model",
        fix, entry=first or spec.run_entry, severity=severity, edits=tuple(edits) if auto else (),
    )]
