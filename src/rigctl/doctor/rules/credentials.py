"""Credentials written in clear into a unit: whoever may read the file, run `systemctl show` or
`podman inspect` reads them too. The rule on names is preflight's (``rigctl.preflight.secrets``), so what
``rigctl render`` and preflight warn about before a deployment is what doctor finds after it."""

from __future__ import annotations

from rigctl.doctor.rules.context import Hit, RuleContext
from rigctl.preflight.secrets import unit_secrets


def in_clear(ctx: RuleContext) -> list[Hit]:
    """A variable or option named like a credential (*TOKEN, *KEY, *SECRET, *PASSWORD, --api-key, --hf-token,
    --token) holds a literal value in Environment=, Exec=, PodmanArgs= or ExecStart=; EnvironmentFile= and
    Secret= keep values out of the unit and are fine. The value is never shown."""
    found = unit_secrets(ctx.unit.merged)
    if not found:
        return []
    if ctx.unit.managed:
        fix = ("keep it in a podman secret: `podman secret create NAME FILE`, then in the recipe "
               "container.secrets: [{name: NAME, env: VARIABLE}] instead of the value, and `rigctl up` again")
    elif ctx.unit.kind == "container":
        fix = ("keep it in a podman secret: `podman secret create NAME FILE`, then "
               "Secret=NAME,type=env,target=VARIABLE in [Container] instead of the value (or an EnvironmentFile= "
               "only its owner can read)")
    else:
        fix = ("keep it in a podman secret: `podman secret create NAME FILE`, then `podman run --secret "
               "NAME,type=env,target=VARIABLE` instead of the value (or an EnvironmentFile= only its owner can read)")
    shown = "; ".join(f"{e.where} {e.shown}" for e in found)
    return [Hit(f"{shown}: a credential written in clear into the unit, readable by whoever may read the file "
                "or run `systemctl show` / `podman inspect`", fix, entry=found[0].entry)]
