"""The host inventory: which boxes make up the fleet and how to reach them over ssh.

``--hosts FILE`` takes rigctl's own hosts file or an Ansible inventory (INI or YAML, read by
``rigctl.fleet.ansible``); ``rigctl.fleet.loader`` tells them apart by their content and reads either. rigctl's own:

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
Whatever file a value comes from, it reaches ssh only through ``Host``, so the same checks apply to all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rigctl.errors import InvalidInputError, UsageError
from rigctl.fleet.limit import choose
from rigctl.fleet.ssh_options import ALLOW_SSH_OPTIONS, OWN, host_option_problems
from rigctl.util.safefs import RECIPE_LIMIT

HOST_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
# A tag is a group of hosts; Ansible group names may start with '_'.
TAG = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,62}$"
# Every character any reader takes for a line break or a terminal control: C0, DEL, C1, U+2028/9.
CONTROLS = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
HostName = Annotated[str, Field(pattern=HOST_NAME)]
Tag = Annotated[str, Field(pattern=TAG)]
# No leading '-': a destination must never be read by ssh as an option.
Destination = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\[\]:@%+-]+$", min_length=1)]
OptionName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9]*$")]
OptionValue = Annotated[str, Field(pattern=rf"^[^{CONTROLS}]*$")]
# A path or program name: one word on the remote (or local) command line, quoted where it is used
# (ssh.remote_command), so only control characters are refused: a NUL cannot be passed to ssh at all.
Word = Annotated[str, Field(pattern=rf"^[^{CONTROLS}]+$")]
UserName = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_.-]*$")]
Port = Annotated[int, Field(ge=1, le=65535)]

HOSTS_FILE_LIMIT = RECIPE_LIMIT  # 1 MiB: thousands of hosts
FORMATS = {
    "rigctl": "rigctl hosts file",
    "ansible-ini": "Ansible INI inventory",
    "ansible-yaml": "Ansible YAML inventory",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# A ProxyJump hop: [ssh://][user@]host[:port], a destination like ``ssh:``; ssh builds a command line
# from it, so no shell syntax and no leading '-'.
_JUMP_HOP = re.compile(r"^(?:ssh://)?(?:[A-Za-z0-9_.%+-]+@)?[A-Za-z0-9_.\[\]:%+-]+$")


def no_option_jump(options: dict[str, str]) -> dict[str, str]:
    """A ProxyJump hop is a destination too: ssh must never read one as an option."""
    for key, value in options.items():
        if key.lower() != "proxyjump" or value.strip().lower() == "none":
            continue
        for hop in value.split(","):
            if hop.strip().startswith("-"):
                raise ValueError(f"{key}: a jump host may not start with '-'")
            if not _JUMP_HOP.match(hop.strip()):
                raise ValueError(f"{key}: {hop.strip()[:60]!r} is not a jump host ([user@]host[:port])")
    return options


# ssh_config structure, not options: `Match exec` runs a command, `Include` reads another config (which
# may hold anything). ssh refuses them in -o as well; rigctl refuses them always.
CONFIG_DIRECTIVES = {"match": "Match", "include": "Include", "host": "Host"}


def ssh_option_problems(path: str, hosts: Iterable[Host], known: frozenset[str] | None = None) -> list[str]:
    """One line per host and ssh option (or identity file) that the inventory may not set by itself;
    ``known``: the inventory's host names and destinations, the only places a ProxyJump may lead."""
    return [line for host in hosts
            for line in host_option_problems(path, host.name, host.ssh_options, host.identity_file, known)]


def known_hosts(hosts: Iterable[Host]) -> frozenset[str]:
    """Every name a ProxyJump hop may give for a host of the inventory: its name and its ssh host."""
    return frozenset(n.lower() for h in hosts for n in (h.name, h.ssh.rpartition("@")[2]))


def _no_config_directive(options: dict[str, str]) -> dict[str, str]:
    for key in options:
        if key.lower() in CONFIG_DIRECTIVES:
            raise ValueError(f"{key}: ssh_config's {CONFIG_DIRECTIVES[key.lower()]} is not an option "
                             "(it would bring in other configuration or run a command); not allowed here")
    return options


def _not_own(options: dict[str, str]) -> dict[str, str]:
    for key in options:
        if key.lower() in OWN:
            raise ValueError(f"{key}: rigctl sets {OWN[key.lower()]} itself; remove it")
    return options


class Defaults(_Strict):
    user: UserName | None = None
    port: Port | None = None
    identity_file: Word | None = None
    ssh_options: dict[OptionName, OptionValue] = Field(default_factory=dict)
    rigctl: Word = Field(default="rigctl", description="rigctl's name or path on the host: one word, run as is")

    _jump = field_validator("ssh_options")(no_option_jump)
    _directive = field_validator("ssh_options")(_no_config_directive)
    _own = field_validator("ssh_options")(_not_own)


def port_in_destination(destination: str) -> str | None:
    """Why ``destination`` would not reach the host ssh is meant to: ssh takes ``host:port`` (and
    ``[v6]``) as one host name and fails to resolve it, so a port must come apart, as ``port:``."""
    user, at, host = destination.rpartition("@")
    prefix = f"{user}{at}"
    if host.startswith("[") and "]" in host:
        inside, _, rest = host[1:].partition("]")
        if rest[:1] == ":" and rest[1:].isdigit():
            return (f"{destination!r} carries a port, which ssh would take as part of the host name: "
                    f"write {prefix}{inside} and put {rest[1:]} in port: (ansible_port in an Ansible inventory)")
        return f"{destination!r}: ssh takes an IPv6 address without brackets: write {prefix}{inside}"
    if "[" in host or "]" in host:
        return f"{destination!r}: brackets belong only around an IPv6 address, and ssh wants it without them"
    if host.count(":") == 1:
        name, _, port = host.partition(":")
        return (f"{destination!r} looks like host:port, which ssh would take as one host name: write "
                f"{prefix}{name} and put {port or 'the port'} in port: (ansible_port in an Ansible inventory)")
    return None


class Host(_Strict):
    name: HostName
    ssh: Destination
    tags: list[Tag] = Field(default_factory=list)
    user: UserName | None = None
    port: Port | None = None
    identity_file: Word | None = None
    ssh_options: dict[OptionName, OptionValue] = Field(default_factory=dict)
    rigctl: Word | None = None  # one word, never shell syntax: `sudo rigctl` is a program named so

    _jump = field_validator("ssh_options")(no_option_jump)
    _directive = field_validator("ssh_options")(_no_config_directive)
    _own = field_validator("ssh_options")(_not_own)

    @property
    def destination(self) -> str:
        """``user@host:port`` as a person reads it (the port only when the inventory gives one)."""
        dest = f"{self.user}@{self.ssh}" if self.user else self.ssh
        return f"{dest}:{self.port}" if self.port else dest

    @property
    def program(self) -> str:
        """The rigctl to run on the host: the inventory's ``rigctl:`` word, else ``rigctl`` on its PATH."""
        return self.rigctl or "rigctl"

    @field_validator("ssh", mode="before")
    @classmethod
    def _not_an_option(cls, value: Any) -> Any:
        # before the pattern: whatever else is wrong with it, this is what matters
        if isinstance(value, str) and value.startswith("-"):
            raise ValueError("ssh destination may not start with '-'")
        return value

    @field_validator("ssh")
    @classmethod
    def _plain_destination(cls, value: str) -> str:
        problem = port_in_destination(value)
        if problem:
            raise ValueError(problem)
        return value


class HostsFile(_Strict):
    """rigctl's own hosts file, as written."""

    defaults: Defaults = Field(default_factory=Defaults)
    hosts: list[Host] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> HostsFile:
        seen: set[str] = set()
        for host in self.hosts:
            if host.name in seen:
                raise ValueError(f"host name {host.name!r} appears twice")
            seen.add(host.name)
        return self

    def resolved(self, host: Host) -> Host:
        """The host with the file's defaults filled in."""
        d = self.defaults
        return host.model_copy(update={
            "user": host.user or d.user,
            "port": host.port or d.port,
            "identity_file": host.identity_file or d.identity_file,
            "ssh_options": {**d.ssh_options, **host.ssh_options},
            "rigctl": host.rigctl or d.rigctl,
        })


@dataclass(frozen=True)
class Inventory:
    """The hosts of one file in file order, defaults applied, and what rigctl will not do for some.

    A host in ``refused`` keeps its place (its name and groups count for --limit, --tag and --only)
    but is never handed out: choosing it is an error saying why, so a host Ansible reaches some other
    way (``ansible_connection: local``) is never contacted over ssh by mistake. ``ignored`` holds, per
    host, the Ansible variables rigctl does not follow and why; they become warnings."""

    path: str
    format: str
    hosts: tuple[Host, ...]
    groups: frozenset[str] = frozenset()  # every group name, groups without hosts too
    refused: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    ignored: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # warnings about the file as a whole

    def select(self, *, tags: Iterable[str] = (), names: Iterable[str] = (), limit: str | None = None,
               allow_ssh_options: bool = False) -> list[Host]:
        """The hosts that pass every filter given: all the tags, one of the names, the --limit pattern.
        A chosen host with an ssh option (or identity file) an inventory may not set by itself
        (``ssh_options``' allow-list) is an error unless ``allow_ssh_options`` (the operator's
        --allow-ssh-options)."""
        wanted_tags, wanted_names = set(tags), set(names)
        unknown = wanted_names - {h.name for h in self.hosts}
        if unknown:
            raise UsageError(
                f"no such host in the inventory: {', '.join(sorted(unknown))}",
                fix=f"known hosts: {', '.join(h.name for h in self.hosts)}",
            )
        within = None if limit is None else choose(limit, {h.name: h.tags for h in self.hosts}, self.groups)
        chosen = [
            h for h in self.hosts
            if (not wanted_names or h.name in wanted_names) and wanted_tags <= set(h.tags)
            and (within is None or h.name in within)
        ]
        if not chosen:
            if limit is None:
                raise UsageError(f"no host carries the tags {sorted(wanted_tags)}")
            also = [f"--tag {t}" for t in sorted(wanted_tags)] + [f"--only {n}" for n in sorted(wanted_names)]
            raise UsageError(f"--limit {limit!r} selects no host" + (f" with {' '.join(also)}" if also else ""))
        self._refuse(chosen)
        problems = [] if allow_ssh_options else ssh_option_problems(self.path, chosen, known_hosts(self.hosts))
        if problems:
            raise InvalidInputError(problems, fix=f"remove it from the inventory (connection settings such as Port, "
                                                  "User, ConnectTimeout and a ProxyJump to a host of the inventory "
                                                  f"pass), or pass {ALLOW_SSH_OPTIONS} if you trust this file as code")
        return chosen

    def get(self, name: str, *, allow_ssh_options: bool = False) -> Host:
        return self.select(names=[name], allow_ssh_options=allow_ssh_options)[0]

    def _refuse(self, chosen: Sequence[Host]) -> None:
        refused = [h.name for h in chosen if self.refused.get(h.name)]
        if refused:
            raise InvalidInputError(
                [f"{self.path}: host {name}: {why}" for name in refused for why in self.refused[name]],
                fix=f"leave {'it' if len(refused) == 1 else 'them'} out with --limit "
                    f"'{','.join('!' + n for n in refused)}', or change the inventory",
            )

    def warnings(self, chosen: Sequence[Host]) -> list[str]:
        """One line per thing rigctl ignores, naming the chosen hosts it concerns."""
        by_note: dict[str, list[str]] = {}
        for host in chosen:
            for note in self.ignored.get(host.name, ()):
                by_note.setdefault(note, []).append(host.name)
        lines = list(self.notes)
        for note, names in by_note.items():
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            lines.append(f"{note} (host{'s' if len(names) > 1 else ''} {shown})")
        return lines

    def report(self, chosen: Sequence[Host], *, limit: str | None = None) -> dict[str, Any]:
        """What was read, for the JSON output and the text view."""
        return {"path": self.path, "format": self.format, "kind": FORMATS[self.format], "limit": limit,
                "hosts": len(self.hosts), "chosen": len(chosen), "warnings": self.warnings(chosen)}
