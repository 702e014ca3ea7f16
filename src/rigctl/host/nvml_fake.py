"""A fake NVML for tests and for planning boxes rigctl has never seen, driven by a capture.

A capture is the JSON document ``capture_nvml`` writes (and ``shared/reference/nvml-h200.json`` is one,
taken on a real H200): per call either ``{"ok": value}`` or ``{"error": "NVMLError_NotSupported",
"message": "Not Supported"}``. ``FakeNvml`` answers from it with the types pynvml really returns
(ctypes structures for memory and PCI info, a tuple for the compute capability, lists for the
mode pairs, friendly objects for processes) and raises pynvml's own exception classes, so code that
works against the fake works against the library. Captures may add ``"init"`` (an error for nvmlInit,
e.g. NVMLError_LibraryNotFound), ``"p2p"`` and ``"topology"`` (keyed ``"A,B"``) for multi-GPU boxes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
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
    import pynvml  # noqa: PLC0415 - lazy, like the real adapter

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
    """Quacks like the pynvml module for the calls in ``rigctl.host.nvml.NvmlLib``."""

    def __init__(self, capture: Mapping[str, Any]) -> None:
        self.capture = copy.deepcopy(dict(capture))
        self.NVMLError: type[Exception] = _pynvml().NVMLError
        self.initialised = False
        self.calls: list[str] = []
        for name in DEVICE_CALLS:
            setattr(self, name, self._device_call(name))

    # --- helpers ---
    def _answer(self, call: str, entry: Mapping[str, Any] | None) -> Any:
        self.calls.append(call)
        if entry is None:
            raise _error("NVMLError_NotSupported")()
        if "error" in entry:
            raise _error(entry["error"])()
        return _convert(call, entry["ok"])

    def _need_init(self) -> None:
        if not self.initialised:
            raise _error("NVMLError_Uninitialized")()

    def _device_call(self, name: str) -> Callable[[Any], Any]:
        def call(handle: _Handle) -> Any:
            self._need_init()
            return self._answer(name, self.capture["devices"][handle.index].get(name))

        call.__name__ = name
        return call

    # --- library ---
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        init = self.capture.get("init")
        if init is not None and "error" in init:
            raise _error(init["error"])()
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._need_init()
        self.initialised = False

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
        pairs = self.capture.get(table, {})
        entry: Mapping[str, Any] | None = pairs.get(f"{a.index},{b.index}") or pairs.get(f"{b.index},{a.index}")
        return entry if entry is not None else pairs.get("*")  # "*": the answer for every pair

    def nvmlDeviceGetP2PStatus(self, a: _Handle, b: _Handle, index: int) -> int:
        self._need_init()
        if not isinstance(index, int):
            # ctypes cannot pass a tuple as an enum: this is what the NVML_P2P_CAPS_INDEX_READ = 0, gotcha does
            raise TypeError(f"p2pIndex must be an int, not {type(index).__name__}")
        return int(self._answer("nvmlDeviceGetP2PStatus", self._pair_entry("p2p", a, b)))

    def nvmlDeviceGetTopologyCommonAncestor(self, a: _Handle, b: _Handle) -> int:
        self._need_init()
        return int(self._answer("nvmlDeviceGetTopologyCommonAncestor", self._pair_entry("topology", a, b)))


def capture_nvml(lib: Any) -> dict[str, Any]:
    """Record every call rigctl makes, the way the fake replays it, plus each value's Python type.
    Run on a real GPU box (``python -m rigctl.host.nvml_fake``) to refresh a fixture."""

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
    out["p2p"], out["topology"] = {}, {}
    for i in range(count):
        for j in range(i + 1, count):
            out["p2p"][f"{i},{j}"] = record(lib.nvmlDeviceGetP2PStatus, handles[i], handles[j], 0)
            out["topology"][f"{i},{j}"] = record(lib.nvmlDeviceGetTopologyCommonAncestor, handles[i], handles[j])
    try:
        lib.nvmlDeviceGetHandleByIndex(count + 7)
        out["bad_index_error"] = None
    except lib.NVMLError as exc:
        out["bad_index_error"] = [type(exc).__name__, str(exc)]
    lib.nvmlShutdown()
    return out


if __name__ == "__main__":  # pragma: no cover - run by hand on a GPU box
    import json
    import sys

    import pynvml

    json.dump(capture_nvml(pynvml), sys.stdout, indent=1)
    sys.stdout.write("\n")
