"""CDI specs and the NVIDIA driver they were generated for, and the one rule that says a spec is stale.

``nvidia-ctk cdi generate`` writes the paths of the driver's libraries into the spec, versioned
(``libcuda.so.570.86.15``). After a driver upgrade those files are gone and every container using the
spec fails with ``cannot stat``, so preflight (before ``up``) and doctor (on a running box) both judge a
spec by ``stale``, over facts read here: the same probe, the same reading of a spec, the same rule.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import ValidationError

from rigctl.errors import InvalidInputError
from rigctl.host.facts import Cdi, CdiSpec
from rigctl.podman_args import NVIDIA_CDI_KIND
from rigctl.recipe.problems import plain_message
from rigctl.util import safefs

CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
CDI_LIMIT = 4 * safefs.MiB  # a CDI spec is tens of KiB even for many GPUs
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"

# A driver library's file suffix: the driver's own version (three-digit major since 2012). The libraries
# with a version of their own that such a spec also mounts (libnvidia-egl-wayland.so.1.1.13) never match.
_SO_VERSION = re.compile(r"\.so\.(\d{3}\.\d+(?:\.\d+)?)\b")
_NVRM = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def spec_from_text(path: str, text: str, mtime_ns: int | None = None) -> CdiSpec:
    """What a spec says: its kind, device names and the driver versions its libraries carry. Text that
    is no spec is a spec with an ``error``, never an exception."""
    from rigctl.recipe.catalog import load_yaml  # noqa: PLC0415 - lazy: only CDI specs need YAML

    versions = sorted(set(_SO_VERSION.findall(text)))
    try:  # JSON specs parse as YAML too; aliases are bounded like a recipe's
        data = load_yaml(text, path)
    except InvalidInputError as exc:
        return CdiSpec(path=path, mtime_ns=mtime_ns, driver_versions=versions,
                       error=f"not YAML/JSON: {exc.problems[0].removeprefix(f'{path}: ')}")
    except RecursionError:
        return CdiSpec(path=path, mtime_ns=mtime_ns, driver_versions=versions, error="not YAML/JSON: nested too deep")
    if not isinstance(data, dict):
        return CdiSpec(path=path, mtime_ns=mtime_ns, driver_versions=versions, error="top level is not a mapping")
    devices = [str(d.get("name")) for d in data.get("devices") or [] if isinstance(d, dict) and "name" in d]
    try:
        return CdiSpec(path=path, kind=data.get("kind"), devices=devices, mtime_ns=mtime_ns,
                       driver_versions=versions)
    except ValidationError as exc:  # a kind that is not a string, a device name of 10 KB, ...
        return CdiSpec(path=path, mtime_ns=mtime_ns,
                       error=f"not a CDI spec: {plain_message(exc.errors(include_url=False)[0])}")


def read_spec(path: Path) -> CdiSpec:
    """A spec file, bounded and regular files only: a FIFO dropped in /var/run/cdi must not hang."""
    try:
        got = safefs.read_file(path, limit=CDI_LIMIT)
        assert got is not None
        text, mtime = got.text(path), got.st.st_mtime_ns
    except InvalidInputError as exc:
        return CdiSpec(path=str(path), error=exc.problems[0].removeprefix(f"{path}: "))
    return spec_from_text(str(path), text, mtime)


def nvidia_specs(cdi: Cdi) -> list[CdiSpec]:
    return [s for s in cdi.specs if s.kind == NVIDIA_CDI_KIND]


def _older(version: str, than: str) -> bool:
    try:
        return tuple(map(int, version.split("."))) < tuple(map(int, than.split(".")))
    except ValueError:
        return False


def stale(spec: CdiSpec, driver: str | None, cdi: Cdi) -> str | None:
    """Why ``spec`` no longer fits the loaded driver, as words that follow the spec's path; None when it
    fits or nothing is known. Any library of another driver version is enough: that one file is gone,
    and containers fail on it however many of the others still match."""
    others = [v for v in spec.driver_versions if v != driver]
    if driver and others:
        relation = "older than" if all(_older(v, driver) for v in others) else "not"
        return f"was generated for driver {', '.join(others)}, {relation} the loaded driver {driver}"
    if spec.mtime_ns is not None and cdi.driver_installed_ns is not None and spec.mtime_ns < cdi.driver_installed_ns:
        return f"is older than the installed driver ({cdi.driver_library})"
    return None


# --- the loaded driver -------------------------------------------------------------------------------


def driver_from_proc(text: str) -> str | None:
    """The version in /proc/driver/nvidia/version's NVRM line."""
    match = _NVRM.search(text)
    return match.group(1) if match else None


def _driver_from_nvml() -> str | None:
    from rigctl.host.nvml_lib import nvml_if_present  # noqa: PLC0415 - only without /proc's answer

    lib = nvml_if_present()
    if lib is None:
        return None
    try:
        lib.nvmlInit()
        try:
            version: str | bytes = lib.nvmlSystemGetDriverVersion()
        finally:
            lib.nvmlShutdown()
    except Exception:  # NVMLError_DriverNotLoaded and friends: no driver to judge a spec against
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def probe_driver(version_file: str = DRIVER_VERSION_FILE) -> tuple[str | None, str | None]:
    """(the loaded driver's version, where it was read): the kernel module's own file, else NVML."""
    try:
        text = safefs.read_text_or_none(version_file, limit=64 * safefs.KiB)
    except InvalidInputError:
        text = None
    version = driver_from_proc(text) if text else None
    if version is not None:
        return version, version_file
    version = _driver_from_nvml()
    return version, ("nvml" if version else None)
