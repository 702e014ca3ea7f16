"""Read a host inventory of whichever kind ``--hosts FILE`` names: rigctl's own hosts file
(``fleet.inventory.HostsFile``) or an Ansible inventory, INI or YAML (``fleet.ansible``), told apart by
its content; the default is $XDG_CONFIG_HOME/rigctl/hosts.yaml."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rigctl.errors import InvalidInputError
from rigctl.fleet import ansible
from rigctl.fleet.inventory import HOSTS_FILE_LIMIT, HostsFile, Inventory
from rigctl.invocation import current
from rigctl.recipe.catalog import load_yaml
from rigctl.recipe.problems import Origin, format_validation_error
from rigctl.util.safefs import read_own, read_text


def default_inventory_path() -> Path:
    return current().config_home / "rigctl" / "hosts.yaml"


_YAML_KEY = re.compile(r"""^(?:---|%|\{|["']?[^\s#;\[\]:'"]+["']?:(?:\s|$))""")


def detect_format(text: str) -> str:
    """"ansible-ini" or "yaml" from the first line that is not blank or a comment: a YAML document
    starts with a ``key:`` (or ``---``, ``{``); an INI inventory with a ``[section]`` or a host line
    (``gpu01:2222`` and ``fe80::1`` are hosts, not keys: no space after the colon)."""
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        return "yaml" if _YAML_KEY.match(stripped) else "ansible-ini"
    return "yaml"  # empty: the YAML reader says so


def _is_rigctl(data: Mapping[str, Any]) -> bool:
    """rigctl's own file has a ``hosts:`` list (or ``defaults:``); Ansible's top level is groups."""
    return "defaults" in data or ("hosts" in data and not isinstance(data["hosts"], dict))


def load_inventory(path: str | Path | None = None) -> Inventory:
    chosen = Path(path) if path is not None else default_inventory_path()
    if not chosen.is_file():
        raise InvalidInputError(
            [f"{chosen}: no host inventory here"],
            fix="write one (hosts: [{name: box, ssh: user@box, tags: [gpu]}]), or pass --hosts FILE "
                "(rigctl's hosts file or an Ansible inventory, INI or YAML)",
        )
    if path is None:  # rigctl's own configuration: an inventory is code, so it must pass the trust rule
        got = read_own(chosen, limit=HOSTS_FILE_LIMIT)
        assert got is not None
        text = got.text(chosen)
    else:
        text = read_text(chosen, limit=HOSTS_FILE_LIMIT)
    if detect_format(text) == "ansible-ini":
        return ansible.from_ini(text, str(chosen))
    data = load_yaml(text, chosen)
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise InvalidInputError([f"{chosen}: the top level must be a mapping, not {kind}"])
    if not _is_rigctl(data):
        return ansible.from_yaml(data, str(chosen))
    try:
        hosts_file = HostsFile.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(format_validation_error(str(chosen), exc, model=HostsFile,
                                                        origins=[Origin(text=text)])) from None
    hosts = tuple(hosts_file.resolved(h) for h in hosts_file.hosts)
    return Inventory(str(chosen), "rigctl", hosts, frozenset(t for h in hosts for t in h.tags))
