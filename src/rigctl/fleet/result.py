"""What one host answered to a fleet command (``HostResult``), and the fleet's whole answer
(``FleetResult``, the JSON that scripts read)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rigctl.fleet.visible import tail
from rigctl.util.proc import Completed
from rigctl.util.text import VERSION


@dataclass
class HostResult:
    name: str
    destination: str
    ok: bool = False
    reachable: bool = True
    via: str = "ssh"  # "rigctl" when the remote rigctl answered, "ssh" when we read podman/systemctl/files
    rigctl_version: str | None = None  # what the remote rigctl's answer says it is (``note_version``); None: no answer
    elapsed_s: float = 0.0
    error: str | None = None
    summary: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def version_skew(self) -> bool:
        """Whether a rigctl answered for this host, and is another version than this one."""
        return self.rigctl_version is not None and self.rigctl_version != VERSION

    def not_reached(self, done: Completed) -> HostResult:
        """This host as ssh left it: unreachable, with the last line ssh said (made visible)."""
        self.reachable = False
        detail = (done.stderr or done.stdout).strip().splitlines()
        self.error = f"unreachable: {tail(detail[-1]) if detail else f'ssh exited {done.rc}'}"
        return self


@dataclass
class FleetResult:
    command: str
    hosts: list[HostResult]
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)

    def to_dict(self) -> dict[str, Any]:  # reshapes on purpose: adds the counts scripts read
        return {
            "hosts": [asdict(h) for h in self.hosts],
            "elapsed_s": round(self.elapsed_s, 3),
            "counts": {
                "hosts": len(self.hosts),
                "ok": sum(1 for h in self.hosts if h.ok),
                "unreachable": sum(1 for h in self.hosts if not h.reachable),
            },
            # this rigctl's version, and the hosts whose rigctl answered with another one (or with none)
            "versions": {"local": VERSION, "skew": [h.name for h in self.hosts if h.version_skew]},
        }

