"""A fake NVML for tests, driven by a capture, and the tool that takes a capture on a real GPU box.

Not shipped with rigctl: tests import it as ``tests.support.nvml_fake``, and
``tests/fixtures/inventory/capture-on-gpu.sh`` runs it as a file (``python3 tests/support/nvml_fake.py``,
nothing but nvidia-ml-py needed), so it imports nothing from rigctl or the tests.

A capture is the JSON document ``capture_nvml`` writes (and ``shared/reference/nvml-h200.json`` is one,
taken on a real H200): per call either ``{"ok": value}`` or ``{"error": "NVMLError_NotSupported",
"message": "Not Supported"}``. ``FakeNvml`` answers from it with the types pynvml really returns
(ctypes structures for memory and PCI info, a tuple for the compute capability, lists for the
mode pairs, friendly objects for processes) and raises pynvml's own exception classes, so code that
works against the fake works against the library. Captures may add ``"init"`` (an error for nvmlInit,
e.g. NVMLError_LibraryNotFound), ``"p2p"`` and ``"topology"`` (keyed ``"A,B"``) for multi-GPU boxes.

NVLink, as the real two-H200 capture (``shared/reference/h200x2/nvml-h200x2.json``) records it: a device's
``"nvlink"`` maps a link number to ``{"state": answer, "version": answer}`` or to the error the link answered
(InvalidArgument past the device's last link). A device without ``"nvlink"`` answers NotSupported, as a card
without NVLink does; a link beyond the recorded ones answers InvalidArgument. A pair's ``"p2p"`` entry is
either one answer (the READ capability: hand-made boxes) or one answer per capability (``"read"``,
``"write"``, ``"nvlink"``, ``"atomics"``, ``"prop"``) plus ``"topology"``, keyed ``"A-B"`` per direction.
The fake never invents an answer a capture does not hold: asking for one raises ``ValueError``.

Answers can change over time: ``FakeNvml(capture, clock=...)`` with ``at(when, device, entries)`` answers a
device's calls from ``entries`` once ``clock()`` has reached ``when`` (a swap's FROM holding memory, then
letting it go). ``holding`` makes such entries the way a real H200 showed a process's memory
(tests/fixtures/inventory/nvml-h200-release.json): the process listed with its bytes and the device's used
memory grown by as much, until process and memory go together.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

DEVICE_CALLS = (
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPowerManagementDefaultLimit",
    "nvmlDeviceGetPowerManagementLimitConstraints",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetNumaNodeId",
)

# nvmlDeviceGetP2PStatus capability index (NVML_P2P_CAPS_INDEX_*) -> the key a capture stores it under
P2P_CAPS = {0: "read", 1: "write", 2: "nvlink", 3: "atomics", 4: "prop"}
NVLINK_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS: the links a capture asks about

# What pynvml's wrapper returns for each call, by Python type name (checked against a real capture).
RETURN_TYPES = {
    "nvmlDeviceGetName": "str",
    "nvmlDeviceGetUUID": "str",
    "nvmlDeviceGetPciInfo": "nvmlPciInfo_t",
    "nvmlDeviceGetMemoryInfo": "c_nvmlMemory_t",
    "nvmlDeviceGetPowerManagementLimitConstraints": "list",
    "nvmlDeviceGetCudaComputeCapability": "tuple",
    "nvmlDeviceGetEccMode": "list",
    "nvmlDeviceGetMigMode": "list",
    "nvmlDeviceGetComputeRunningProcesses": "list",
    "nvmlDeviceGetGraphicsRunningProcesses": "list",
}


def _pynvml() -> Any:
    import pynvml

    return pynvml


def _error(name: str) -> type[Exception]:
    cls = getattr(_pynvml(), name, None)
    if not (isinstance(cls, type) and issubclass(cls, _pynvml().NVMLError)):
        raise ValueError(f"capture names {name!r}, which is not a pynvml error class")
    return cls


def _convert(call: str, value: Any) -> Any:
    """JSON value -> the object pynvml's wrapper would return."""
    p = _pynvml()
    if call == "nvmlDeviceGetMemoryInfo":
        return p.c_nvmlMemory_t(total=value["total"], free=value["free"], used=value["used"])
    if call == "nvmlDeviceGetPciInfo":
        info = p.nvmlPciInfo_t()
        for key, v in value.items():
            setattr(info, key, v.encode() if isinstance(v, str) else v)
        return info
    if call == "nvmlDeviceGetCudaComputeCapability":
        return (int(value[0]), int(value[1]))
    if call in {"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"}:
        return [p.nvmlFriendlyObject({"pid": proc["pid"], "usedGpuMemory": proc.get("usedGpuMemory"),
                                      "gpuInstanceId": proc.get("gpuInstanceId", 0xFFFFFFFF),
                                      "computeInstanceId": proc.get("computeInstanceId", 0xFFFFFFFF)})
                for proc in value]
    if isinstance(value, list):
        return list(value)
    return value


def to_json(value: Any) -> Any:
    """The inverse of ``_convert``: how a capture stores a returned object."""
    if hasattr(value, "_fields_"):
        return {name: to_json(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if hasattr(value, "__dict__") and type(value).__name__ == "nvmlFriendlyObject":
        return {k: to_json(v) for k, v in vars(value).items()}
    if isinstance(value, bytes):
        return value.decode()
    return value


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvmlDevice {self.index}>"


class FakeNvml:
    """Quacks like the pynvml module for the calls in ``rigctl.host.nvml_lib.NvmlLib``."""

    def __init__(self, capture: Mapping[str, Any], *, clock: Callable[[], float] | None = None) -> None:
        self.capture = copy.deepcopy(dict(capture))
        self.NVMLError: type[Exception] = _pynvml().NVMLError
        self.inits = 0  # NVML counts its initialisations: shutdown ends only the last one
        self.calls: list[str] = []
        self._clock = clock
        self._later: list[tuple[float, int, dict[str, Any]]] = []  # (from when, device index, its entries)
        for name in DEVICE_CALLS:
            setattr(self, name, self._device_call(name))

    def at(self, when: float, device: int, entries: Mapping[str, Any]) -> None:
        """From ``when`` (by the clock) on, ``device`` answers the calls in ``entries`` (capture entries,
        ``{"ok": value}`` or an error) instead of the capture's; a later ``at`` wins over an earlier one."""
        if self._clock is None:
            raise ValueError("answers that change over time need FakeNvml(capture, clock=...)")
        if not 0 <= device < len(self.capture["devices"]):
            raise ValueError(f"the capture has no device {device}")
        unknown = set(entries) - set(DEVICE_CALLS)
        if unknown:
            raise ValueError(f"not device calls rigctl makes: {sorted(unknown)}")
        self._later.append((when, device, copy.deepcopy(dict(entries))))
        self._later.sort(key=lambda item: item[0])

    def _entry(self, device: int, name: str) -> Mapping[str, Any] | None:
        entry: Mapping[str, Any] | None = self.capture["devices"][device].get(name)
        if self._later and self._clock is not None:
            now = self._clock()
            for when, index, entries in self._later:
                if when <= now and index == device and name in entries:
                    entry = entries[name]
        return entry

    # --- helpers ---
    def _answer(self, call: str, entry: Mapping[str, Any] | None) -> Any:
        self.calls.append(call)
        if entry is None:
            raise _error("NVMLError_NotSupported")()
        if "error" in entry:
            raise _error(entry["error"])()
        return _convert(call, entry["ok"])

    @property
    def initialised(self) -> bool:
        return self.inits > 0

    def _need_init(self) -> None:
        if not self.initialised:
            raise _error("NVMLError_Uninitialized")()

    def _device_call(self, name: str) -> Callable[[Any], Any]:
        def call(handle: _Handle) -> Any:
            self._need_init()
            return self._answer(name, self._entry(handle.index, name))

        call.__name__ = name
        return call

    # --- library ---
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        init = self.capture.get("init")
        if init is not None and "error" in init:
            raise _error(init["error"])()
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self._need_init()
        self.inits -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._need_init()
        return str(self._answer("nvmlSystemGetDriverVersion", self.capture.get("driver")))

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._need_init()
        return str(self._answer("nvmlSystemGetNVMLVersion", self.capture.get("nvml_version")))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._need_init()
        return int(self._answer("nvmlSystemGetCudaDriverVersion", self.capture.get("cuda_driver_version")))

    def nvmlDeviceGetCount(self) -> int:
        self._need_init()
        return int(self.capture.get("count", len(self.capture.get("devices", []))))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._need_init()
        if not isinstance(index, int) or not 0 <= index < self.nvmlDeviceGetCount():
            # the real library's answer to a bad index, recorded in the capture's "bad_index_error"
            raise _error("NVMLError_InvalidArgument")()
        return _Handle(index)

    def _pair_entry(self, table: str, a: _Handle, b: _Handle) -> Mapping[str, Any] | None:
        pairs: Mapping[str, Mapping[str, Any]] = self.capture.get(table, {})
        for x, y in ((a.index, b.index), (b.index, a.index)):  # this direction first, as the driver is asked
            for key in (f"{x},{y}", f"{x}-{y}"):
                if key in pairs:
                    return pairs[key]
        return pairs.get("*")  # "*": the answer for every pair

    @staticmethod
    def _capability(entry: Mapping[str, Any] | None, key: str, what: str) -> Mapping[str, Any] | None:
        """From a per-capability pair entry, the answer under ``key``; a one-answer entry as it is."""
        if entry is None or "ok" in entry or "error" in entry:
            return entry
        answer: Mapping[str, Any] | None = entry.get(key)
        if answer is None or ("ok" not in answer and "error" not in answer):
            # absent, {"missing": true}, or the capture script's own exception: the driver was never asked
            raise ValueError(f"the capture holds no driver answer for {what}: {answer}")
        return answer

    def nvmlDeviceGetP2PStatus(self, a: _Handle, b: _Handle, index: int) -> int:
        self._need_init()
        if not isinstance(index, int):
            # ctypes cannot pass a tuple as an enum: this is what the NVML_P2P_CAPS_INDEX_READ = 0, gotcha does
            raise TypeError(f"p2pIndex must be an int, not {type(index).__name__}")
        what = f"P2P capability {index} of GPU {a.index}->{b.index}"
        raw = self._pair_entry("p2p", a, b)
        if raw is not None and ("ok" in raw or "error" in raw) and index != 0:
            raise ValueError(f"the capture records only the READ capability, not {what}")
        return int(self._answer("nvmlDeviceGetP2PStatus", self._capability(raw, P2P_CAPS.get(index, "?"), what)))

    def nvmlDeviceGetTopologyCommonAncestor(self, a: _Handle, b: _Handle) -> int:
        self._need_init()
        entry = self._pair_entry("topology", a, b)
        p2p = self._pair_entry("p2p", a, b)
        if entry is None and p2p is not None and "ok" not in p2p and "error" not in p2p:
            entry = self._capability(p2p, "topology", f"the topology of GPU {a.index}->{b.index}")
        return int(self._answer("nvmlDeviceGetTopologyCommonAncestor", entry))

    def _nvlink(self, call: str, handle: _Handle, link: int, what: str) -> int:
        self._need_init()
        links = self.capture["devices"][handle.index].get("nvlink")
        if links is None:
            return int(self._answer(call, None))  # no NVLink on this card: NotSupported
        entry = links.get(str(link), {"error": "NVMLError_InvalidArgument"})  # none recorded: past the last link
        return int(self._answer(call, self._capability(entry, what, f"{what} of link {link} on GPU {handle.index}")))

    def nvmlDeviceGetNvLinkState(self, handle: _Handle, link: int) -> int:
        return self._nvlink("nvmlDeviceGetNvLinkState", handle, link, "state")

    def nvmlDeviceGetNvLinkVersion(self, handle: _Handle, link: int) -> int:
        return self._nvlink("nvmlDeviceGetNvLinkVersion", handle, link, "version")


def holding(device: Mapping[str, Any], procs: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """The memory and compute-process answers of ``device`` (a capture's device) with ``procs`` (pid, bytes)
    holding memory, from the capture's own answers: each process listed with its bytes, the device's used
    memory grown by their sum and free memory shrunk by as much (the real H200 showed 9 MiB more in use than its
    one process's bytes: driver bookkeeping, not modelled). No processes: the capture's idle answers (that H200
    went back to exactly its idle used memory, 615 MiB, as its last process went)."""
    mem = device["nvmlDeviceGetMemoryInfo"]["ok"]
    held = sum(n for _, n in procs)
    if held > mem["free"]:
        raise ValueError(f"{held} bytes do not fit in the {mem['free']} the capture has free")
    listed = [{"pid": pid, "usedGpuMemory": n, "gpuInstanceId": 0xFFFFFFFF, "computeInstanceId": 0xFFFFFFFF}
              for pid, n in procs]
    return {
        "nvmlDeviceGetMemoryInfo": {"ok": {"total": mem["total"], "free": mem["free"] - held, "used": mem["used"] + held}},
        "nvmlDeviceGetComputeRunningProcesses": {"ok": listed},
    }


def capture_nvml(lib: Any) -> dict[str, Any]:
    """Record every call rigctl makes, the way the fake replays it, plus each value's Python type.
    Run on a real GPU box (``python3 tests/support/nvml_fake.py > capture.json``) to refresh a fixture."""

    def record(fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
        try:
            value = fn(*args)
        except lib.NVMLError as exc:
            return {"error": type(exc).__name__, "message": str(exc)}
        return {"ok": to_json(value), "type": type(value).__name__}

    try:
        lib.nvmlInit()
    except lib.NVMLError as exc:
        return {"init": {"error": type(exc).__name__, "message": str(exc)}, "count": 0, "devices": []}
    out: dict[str, Any] = {
        "driver": record(lib.nvmlSystemGetDriverVersion),
        "nvml_version": record(lib.nvmlSystemGetNVMLVersion),
        "cuda_driver_version": record(lib.nvmlSystemGetCudaDriverVersion),
    }
    count = lib.nvmlDeviceGetCount()
    handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    out["count"] = count
    out["devices"] = [{name: record(getattr(lib, name), h) for name in DEVICE_CALLS} for h in handles]
    for device, h in zip(out["devices"], handles, strict=True):
        links = _capture_nvlink(lib, h, record)
        if links is not None:
            device["nvlink"] = links
    out["p2p"] = {}
    for i in range(count):
        for j in range(count):
            if i != j:
                entry = {cap: record(lib.nvmlDeviceGetP2PStatus, handles[i], handles[j], index)
                         for index, cap in P2P_CAPS.items()}  # ints: never pynvml's tuple READ constant
                entry["topology"] = record(lib.nvmlDeviceGetTopologyCommonAncestor, handles[i], handles[j])
                out["p2p"][f"{i}-{j}"] = entry
    try:
        lib.nvmlDeviceGetHandleByIndex(count + 7)
        out["bad_index_error"] = None
    except lib.NVMLError as exc:
        out["bad_index_error"] = [type(exc).__name__, str(exc)]
    lib.nvmlShutdown()
    return out


def _capture_nvlink(lib: Any, handle: Any, record: Callable[..., dict[str, Any]]) -> dict[str, Any] | None:
    """Link by link, the way the fake replays it: None (no ``"nvlink"`` key) for a card that answers
    NotSupported on link 0, and recording stops after the first InvalidArgument (past the last link)."""
    links: dict[str, Any] = {}
    for link in range(NVLINK_MAX_LINKS):
        state = record(lib.nvmlDeviceGetNvLinkState, handle, link)
        if "error" in state:
            if link == 0 and state["error"] == "NVMLError_NotSupported":
                return None
            links[str(link)] = state
            if state["error"] == "NVMLError_InvalidArgument":
                break
            continue
        links[str(link)] = {"state": state, "version": record(lib.nvmlDeviceGetNvLinkVersion, handle, link)}
    return links


def main() -> None:  # pragma: no cover - run by hand on a GPU box
    json.dump(capture_nvml(_pynvml()), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
