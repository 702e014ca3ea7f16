"""The host inventory: which boxes make up the fleet and how to reach them over ssh.

    # $XDG_CONFIG_HOME/rigctl/hosts.yaml
    defaults:                      # optional, applied to every host
      ssh_options: {StrictHostKeyChecking: accept-new}
    hosts:
      - name: desk
        ssh: llm@gpu-desk          # anything `ssh` accepts as a destination (an ssh_config alias too)
        tags: [blackwell, tp2]
      - name: rack-3
        ssh: ops@10.0.0.13
        port: 2222
        identity_file: ~/.ssh/fleet_ed25519

Loaded strictly: unknown keys and duplicate names are errors listed as ``file: dotted.path: problem``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rigctl.errors import InvalidInputError, UsageError
from rigctl.recipe.catalog import read_yaml_mapping
from rigctl.recipe.load import format_validation_error

HostName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
# No leading '-': a destination must never be read by ssh as an option.
Destination = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\[\]:@%+-]+$", min_length=1)]
OptionName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9]*$")]
OptionValue = Annotated[str, Field(pattern=r"^[^\n\r\x00]*$")]
# A path or program name: one word on the remote (or local) command line, quoted where it is used
# (ssh.remote_command), so only control characters are refused: a NUL cannot be passed to ssh at all.
Word = Annotated[str, Field(pattern=r"^[^\x00-\x1f\x7f]+$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Defaults(_Strict):
    user: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_.-]*$")
    port: int | None = Field(default=None, ge=1, le=65535)
    identity_file: Word | None = None
    ssh_options: dict[OptionName, OptionValue] = Field(default_factory=dict)
    rigctl: Word = Field(default="rigctl", description="rigctl's name or path on the host: one word, run as is")


class Host(_Strict):
    name: HostName
    ssh: Destination
    tags: list[HostName] = Field(default_factory=list)
    user: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_.-]*$")
    port: int | None = Field(default=None, ge=1, le=65535)
    identity_file: Word | None = None
    ssh_options: dict[OptionName, OptionValue] = Field(default_factory=dict)
    rigctl: Word | None = None  # one word, never shell syntax: `sudo rigctl` is a program named so

    @model_validator(mode="after")
    def _no_option_destination(self) -> Host:
        if self.ssh.startswith("-"):
            raise ValueError("ssh destination may not start with '-'")
        return self


class Inventory(_Strict):
    defaults: Defaults = Field(default_factory=Defaults)
    hosts: list[Host] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Inventory:
        seen: set[str] = set()
        for host in self.hosts:
            if host.name in seen:
                raise ValueError(f"host name {host.name!r} appears twice")
            seen.add(host.name)
        return self

    def resolved(self, host: Host) -> Host:
        """The host with the inventory defaults filled in."""
        d = self.defaults
        return host.model_copy(update={
            "user": host.user or d.user,
            "port": host.port or d.port,
            "identity_file": host.identity_file or d.identity_file,
            "ssh_options": {**d.ssh_options, **host.ssh_options},
            "rigctl": host.rigctl or d.rigctl,
        })

    def select(self, *, tags: Iterable[str] = (), names: Iterable[str] = ()) -> list[Host]:
        wanted_tags, wanted_names = set(tags), set(names)
        unknown = wanted_names - {h.name for h in self.hosts}
        if unknown:
            raise UsageError(
                f"no such host in the inventory: {', '.join(sorted(unknown))}",
                fix=f"known hosts: {', '.join(h.name for h in self.hosts)}",
            )
        chosen = [
            self.resolved(h) for h in self.hosts
            if (not wanted_names or h.name in wanted_names) and wanted_tags <= set(h.tags)
        ]
        if not chosen:
            raise UsageError(f"no host carries the tags {sorted(wanted_tags)}")
        return chosen

    def get(self, name: str) -> Host:
        return self.select(names=[name])[0]


def default_inventory_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "rigctl" / "hosts.yaml"


def load_inventory(path: str | Path | None = None) -> Inventory:
    chosen = Path(path) if path is not None else default_inventory_path()
    if not chosen.is_file():
        raise InvalidInputError(
            [f"{chosen}: no host inventory here"],
            fix="write one (hosts: [{name: box, ssh: user@box, tags: [gpu]}]) or pass --hosts FILE",
        )
    data = read_yaml_mapping(chosen)
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(format_validation_error(str(chosen), exc)) from None
