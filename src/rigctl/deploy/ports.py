"""The outside systems deploy talks to, each behind a small Protocol, with the real adapters.

systemd and podman are driven through their CLIs (via ``rigctl.util.proc.run``): both are present
wherever rigctl deploys, their output formats are stable, and a CLI call needs no socket service.
Every unit, container or image name is passed after ``--``: names come from recipes and deployment
records, which are files, and a file's text must never be read as an option.
Tests use the real adapters against the testbed; only NVML has a fake (there is no GPU here).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from rigctl.errors import CommandError
from rigctl.util.proc import Completed, run


class Scope(StrEnum):
    SYSTEM = "system"
    USER = "user"


# --- systemd ---------------------------------------------------------------------------------------

UNIT_PROPS = (
    "ActiveState", "SubState", "LoadState", "Result", "NRestarts", "Restart", "RestartUSec",
    "ExecMainStatus", "ExecMainCode", "MainPID", "ActiveEnterTimestampMonotonic",
    "ExecMainStartTimestampMonotonic", "FragmentPath", "SourcePath",
)


@dataclass(frozen=True)
class UnitState:
    """What ``systemctl show`` says about one unit, the fields deploy decides on."""

    active: str
    sub: str
    load: str
    result: str
    restarts: int
    restart_policy: str
    exit_status: int | None
    main_pid: int
    active_since_mono_us: int
    source_path: str

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> UnitState:
        def num(key: str) -> int:
            try:
                return int(props.get(key, "") or 0)
            except ValueError:
                return 0

        code = props.get("ExecMainCode", "0")
        return cls(
            active=props.get("ActiveState", "unknown"),
            sub=props.get("SubState", "unknown"),
            load=props.get("LoadState", "unknown"),
            result=props.get("Result", ""),
            restarts=num("NRestarts"),
            restart_policy=props.get("Restart", ""),
            # ExecMainCode 0 means the main process has not exited since the unit started
            exit_status=num("ExecMainStatus") if code not in ("", "0") else None,
            main_pid=num("MainPID"),
            active_since_mono_us=num("ActiveEnterTimestampMonotonic"),
            source_path=props.get("SourcePath", ""),
        )

    @property
    def running(self) -> bool:
        return self.active == "active" and self.sub == "running"


class Systemd(Protocol):
    scope: Scope

    def available(self) -> tuple[bool, str]: ...
    def daemon_reload(self) -> None: ...
    def start(self, unit: str) -> None: ...
    def restart(self, unit: str) -> None: ...
    def stop(self, unit: str, *, wait: bool, timeout: float) -> None: ...
    def reset_failed(self, unit: str) -> None: ...
    def show(self, unit: str) -> UnitState: ...


class SystemctlCli:
    """``systemctl [--user]``. Starts are ``--no-block``: with ``Type=notify`` a blocking start would
    sit through the whole warmup, and deploy wants to watch the warmup itself."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def _argv(self, *args: str) -> list[str]:
        return ["systemctl", *(["--user"] if self.scope is Scope.USER else []), *args]

    def _run(self, *args: str, timeout: float = 30.0) -> Completed:
        return run(self._argv(*args), timeout=timeout)

    def available(self) -> tuple[bool, str]:
        done = self._run("is-system-running", timeout=10.0)
        state = done.stdout.strip()
        if state in {"running", "degraded", "starting", "initializing", "maintenance"}:
            return True, state
        return False, (done.stderr or done.stdout).strip() or f"exit {done.rc}"

    def daemon_reload(self) -> None:
        done = self._run("daemon-reload", timeout=120.0)
        if not done.ok:
            raise CommandError(done.describe())

    def start(self, unit: str) -> None:
        done = self._run("start", "--no-block", "--", unit)
        if not done.ok:
            raise CommandError(done.describe())

    def restart(self, unit: str) -> None:
        done = self._run("restart", "--no-block", "--", unit)
        if not done.ok:
            raise CommandError(done.describe())

    def stop(self, unit: str, *, wait: bool, timeout: float) -> None:
        args = ("stop", "--", unit) if wait else ("stop", "--no-block", "--", unit)
        done = self._run(*args, timeout=timeout)
        if not done.ok and "not loaded" not in done.stderr:
            raise CommandError(done.describe())

    def reset_failed(self, unit: str) -> None:
        self._run("reset-failed", "--", unit)  # fails harmlessly when the unit is not failed

    def show(self, unit: str) -> UnitState:
        done = self._run("show", "-p", ",".join(UNIT_PROPS), "--", unit, timeout=10.0)
        if not done.ok:
            raise CommandError(done.describe())
        props = dict(line.split("=", 1) for line in done.stdout.split("\n") if "=" in line)
        return UnitState.from_props(props)


# --- podman ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    running: bool
    exit_code: int
    pid: int
    image_digest: str
    started_at: str
    labels: dict[str, str]
    log_driver: str = ""  # k8s-file, journald, passthrough...: where `logs -f` must read the output from


class Podman(Protocol):
    def version(self) -> str: ...
    def container(self, name: str) -> ContainerInfo | None: ...
    def logs(self, name: str, *, tail: int | None = None, since: str | None = None) -> list[str]: ...
    def follow(self, name: str, *, tail: int | None = None, since: str | None = None) -> LineStream: ...
    def image_digest(self, ref: str) -> str | None: ...


class LineStream(Protocol):
    def __iter__(self) -> Iterator[str]: ...
    def next_lines(self, timeout: float) -> list[str] | None:
        """The lines that came within ``timeout`` seconds (maybe none); None once the stream has ended
        and every line was read. Use either this or iteration on one stream, not both."""
        ...
    def close(self) -> None: ...


class _ProcLines:
    """Lines from a long-running child (``podman logs -f``, ``journalctl -f``); stdout and stderr merged,
    as the engine wrote them. The only subprocess not run through ``proc.run``: that helper waits for
    completion."""

    def __init__(self, argv: Sequence[str]) -> None:
        self._proc = subprocess.Popen(  # fixed argv, no shell
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, errors="replace", bufsize=1,
        )
        self._queue: queue.SimpleQueue[str | None] | None = None
        self._ended = False

    def __iter__(self) -> Iterator[str]:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            yield line.rstrip("\r\n")

    def _read_into(self, into: queue.SimpleQueue[str | None]) -> None:
        try:
            for line in self:
                into.put(line)
        except (OSError, ValueError):  # the pipe closed under the reader by close(): the stream is over
            pass
        finally:
            into.put(None)  # the end of the stream

    def next_lines(self, timeout: float) -> list[str] | None:
        if self._queue is None:
            # a reader thread: a pipe read cannot time out, and the caller must look around between lines
            self._queue = queue.SimpleQueue()
            threading.Thread(target=self._read_into, args=(self._queue,), name="lines", daemon=True).start()
        if self._ended:
            return None
        out: list[str] = []
        try:
            item = self._queue.get(timeout=timeout)
            while True:
                if item is None:
                    self._ended = True
                    return out or None
                out.append(item)
                if len(out) >= 1000:  # a burst is handed on in pieces, so signatures show as they come
                    return out
                item = self._queue.get_nowait()
        except queue.Empty:
            return out

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


class PodmanCli:
    def __init__(self, binary: str = "podman") -> None:
        self.binary = binary

    def version(self) -> str:
        done = run([self.binary, "version", "--format", "{{.Client.Version}}"], timeout=30.0)
        if not done.ok or not done.stdout.strip():
            raise CommandError(done.describe())
        return done.stdout.strip()

    def container(self, name: str) -> ContainerInfo | None:
        done = run([self.binary, "container", "inspect", "--", name], timeout=30.0)
        if not done.ok:
            return None
        try:
            data: list[dict[str, Any]] = json.loads(done.stdout)
        except json.JSONDecodeError:
            return None
        if not data:
            return None
        item = data[0]
        state = item.get("State", {})
        config = item.get("Config", {})
        return ContainerInfo(
            id=str(item.get("Id", "")),
            name=str(item.get("Name", name)),
            running=bool(state.get("Running")),
            exit_code=int(state.get("ExitCode") or 0),
            pid=int(state.get("Pid") or 0),
            image_digest=str(item.get("ImageDigest", "")),
            started_at=str(state.get("StartedAt", "")),
            labels={str(k): str(v) for k, v in (config.get("Labels") or {}).items()},
            log_driver=str(((item.get("HostConfig") or {}).get("LogConfig") or {}).get("Type") or ""),
        )

    def logs(self, name: str, *, tail: int | None = None, since: str | None = None) -> list[str]:
        argv = [self.binary, "logs"]
        if tail is not None:
            argv += ["--tail", str(tail)]
        if since is not None:
            argv += ["--since", since]
        done = run([*argv, "--", name], timeout=60.0)
        if not done.ok:
            return []
        # podman logs writes the container's stdout to stdout and its stderr to stderr; keep both
        return (done.stdout + done.stderr).splitlines()

    def follow(self, name: str, *, tail: int | None = None, since: str | None = None) -> LineStream:
        argv = [self.binary, "logs", "-f"]
        if tail is not None:
            argv += ["--tail", str(tail)]
        if since is not None:
            argv += ["--since", since]
        return _ProcLines([*argv, "--", name])

    def image_digest(self, ref: str) -> str | None:
        done = run([self.binary, "image", "inspect", "--format", "{{.Digest}}", "--", ref], timeout=30.0)
        return (done.stdout.strip() or None) if done.ok else None


# --- the journal (where there is one) ---------------------------------------------------------------


def journal_available() -> bool:
    return shutil.which("journalctl") is not None and os.path.exists("/run/systemd/journal/socket")


def journal_lines(unit: str, scope: Scope, *, since: str | None = None, tail: int | None = None) -> list[str]:
    argv = ["journalctl", "--no-pager", "-o", "cat", *(["--user"] if scope is Scope.USER else []), f"--unit={unit}"]
    if since:
        argv += ["--since", since]
    if tail:
        argv += ["-n", str(tail)]
    done = run(argv, timeout=60.0)
    return done.stdout.splitlines() if done.ok else []


JOURNAL_FOLLOW_TAIL = 200  # where `logs -f` starts in the journal when neither --tail nor --since is given


def journal_follow(unit: str, scope: Scope, *, tail: int | None = None, since: str | None = None) -> LineStream:
    """``journalctl -f`` on the unit: it follows the unit, not a container, so it spans restarts."""
    argv = ["journalctl", "--follow", "--no-pager", "-o", "cat", *(["--user"] if scope is Scope.USER else []),
            f"--unit={unit}"]
    if since:
        argv += ["--since", since]
    argv += ["-n", str(tail if tail is not None else "all" if since else JOURNAL_FOLLOW_TAIL)]
    return _ProcLines(argv)


# --- HTTP readiness --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Readiness:
    health_status: int | None  # None: no answer (refused, timeout)
    models: list[str]
    max_model_len: int | None
    detail: str

    def ready_for(self, served_name: str) -> bool:
        return self.health_status == 200 and served_name in self.models


class Probe(Protocol):
    def check(self, base_url: str, health_path: str, served_name: str) -> Readiness: ...
    def close(self) -> None: ...


class HttpProbe:
    """``GET /health`` then ``GET /v1/models``: vLLM answers /v1/models before warmup ends, so health alone
    or models alone is not readiness; both must agree."""

    def __init__(self, timeout: float = 1.0) -> None:
        # HTTP and verify load only for a probe: `status` with nothing deployed never needs them
        import httpx  # noqa: PLC0415

        from rigctl.verify.client import API_LIMIT  # noqa: PLC0415

        self.LIMIT = API_LIMIT  # the engine is an HTTP server: its answers are read up to a cap, uncompressed
        self._client = httpx.Client(timeout=timeout, trust_env=False, headers={"Accept-Encoding": "identity"})

    def _get(self, url: str) -> tuple[int, bytes]:
        """Status and body, the body read raw up to LIMIT (a larger or compressed one is an error)."""
        with self._client.stream("GET", url) as resp:
            if resp.headers.get("content-encoding", "identity").lower() != "identity":
                raise ValueError("a compressed answer, though identity was asked for")
            body = bytearray()
            for chunk in resp.iter_raw():
                body += chunk
                if len(body) > self.LIMIT:
                    raise ValueError(f"an answer larger than {self.LIMIT // (1 << 20)} MiB")
            return resp.status_code, bytes(body)

    def check(self, base_url: str, health_path: str, served_name: str) -> Readiness:
        import httpx  # noqa: PLC0415 - loaded by __init__ already

        from rigctl.verify.client import as_count  # noqa: PLC0415 - likewise

        try:
            status, _ = self._get(base_url + health_path)
        except (httpx.HTTPError, ValueError) as exc:
            return Readiness(None, [], None, f"{health_path}: {type(exc).__name__}: {exc}"[:300])
        if status != 200:
            return Readiness(status, [], None, f"{health_path} answered {status}")
        try:
            status, body = self._get(base_url + "/v1/models")
            data = json.loads(body).get("data", []) if status == 200 else []
            if not isinstance(data, list):
                raise ValueError("data is not a list")
        except (httpx.HTTPError, ValueError, AttributeError, RecursionError) as exc:
            return Readiness(200, [], None, f"/v1/models: {type(exc).__name__}: {exc}"[:300])
        ids = [str(m.get("id")) for m in data if isinstance(m, dict)]
        max_len = next(
            (as_count(m["max_model_len"]) for m in data
             if isinstance(m, dict) and m.get("id") == served_name and isinstance(m.get("max_model_len"), int)),
            None,
        )
        return Readiness(200, ids, max_len, "ready" if served_name in ids else f"models: {ids}")

    def close(self) -> None:
        self._client.close()


# --- clock -----------------------------------------------------------------------------------------


class Clock(Protocol):
    def monotonic(self) -> float: ...
    def time(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


# --- GPU memory ------------------------------------------------------------------------------------


class GpuMemory(Protocol):
    def used_by(self, pids: set[int]) -> int | None:
        """MiB used on all GPUs by these processes; None when it cannot be known (no NVML)."""
        ...

    def busy(self, gpu_ids: Sequence[str]) -> bool | None:
        """Whether any process still holds memory on these GPUs; None when unknown."""
        ...


class NvmlGpuMemory:
    def _handles(self) -> list[tuple[str, str, Any]] | None:
        try:
            import pynvml  # noqa: PLC0415 - NVML is optional; only status and down ask for it

            pynvml.nvmlInit()
        except Exception:  # NVML absent or broken: GPU memory is then "n/a", not an error
            return None
        handles = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            handles.append((str(i), uuid if isinstance(uuid, str) else uuid.decode(), handle))
        return handles

    def _procs(self, handle: Any) -> list[Any]:
        import pynvml  # noqa: PLC0415 - see _handles

        procs: list[Any] = []
        for call in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                procs.extend(getattr(pynvml, call)(handle))
            except Exception:  # NotSupported on some boards; the other list may still answer
                continue
        return procs

    def used_by(self, pids: set[int]) -> int | None:
        handles = self._handles()
        if handles is None or not pids:
            return None
        total = 0
        for _, _, handle in handles:
            for proc in self._procs(handle):
                if proc.pid in pids and proc.usedGpuMemory:
                    total += int(proc.usedGpuMemory) // (1024 * 1024)
        return total

    def busy(self, gpu_ids: Sequence[str]) -> bool | None:
        handles = self._handles()
        if handles is None:
            return None
        wanted = set(gpu_ids)
        return any(self._procs(h) for index, uuid, h in handles if index in wanted or uuid in wanted)
