"""Deployment records: one small JSON file per deployed recipe, written atomically next to nothing secret.

The unit file says how to run the engine; the record says what rigctl knows beyond it: the endpoint,
the served name, the GPUs chosen, where the unit files are, and the last output of a failed warmup
(quadlet containers run with ``--rm``, so without a journal that output exists nowhere else).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rigctl.deploy.install import write_atomic
from rigctl.deploy.ports import Scope

RECORD_VERSION = 1


@dataclass
class DeploymentRecord:
    recipe: str
    scope: Scope
    unit: str  # the generated systemd service, e.g. rigctl-glm53-flash.service
    container: str
    unit_dir: str
    unit_files: list[str]
    endpoint: str
    served_name: str
    image: str
    health_path: str = "/health"
    gpu_ids: list[str] = field(default_factory=list)
    recipe_source: str = ""
    installed_at: float = 0.0
    last_failure: dict[str, Any] | None = None
    version: int = RECORD_VERSION

    def to_json(self) -> str:
        data = asdict(self)
        data["scope"] = str(self.scope)
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> DeploymentRecord:
        data = json.loads(text)
        data["scope"] = Scope(data["scope"])
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def record_path(directory: Path, recipe: str) -> Path:
    return directory / f"{recipe}.json"


def save(directory: Path, record: DeploymentRecord) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(record_path(directory, record.recipe), record.to_json())


def load_record(directory: Path, recipe: str) -> DeploymentRecord | None:
    try:
        return DeploymentRecord.from_json(record_path(directory, recipe).read_text())
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def all_records(directory: Path) -> list[DeploymentRecord]:
    if not directory.is_dir():
        return []
    records = []
    for path in sorted(directory.glob("*.json")):
        try:
            records.append(DeploymentRecord.from_json(path.read_text()))
        except (ValueError, KeyError, TypeError):
            continue  # a damaged record must not hide the others
    return records


def delete(directory: Path, recipe: str) -> bool:
    try:
        record_path(directory, recipe).unlink()
    except FileNotFoundError:
        return False
    return True
