"""Where rigctl works, by scope: the quadlet directory units are installed into, the deployment records
and the lock files (the lock itself is ``deploy.state.deployment_lock``).

A leaf (it needs only ``util`` and ``errors``) so that every layer names a scope and a directory the same
way: the renderer (where a unit goes), host facts (which quadlet generator a scope runs), deploy (where
records and locks live) and the CLI (which scope a command means).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from rigctl.errors import UsageError
from rigctl.invocation import current, named_dir


class Scope(StrEnum):
    """Which service manager runs the unit: the system one (root) or the user's own."""

    SYSTEM = "system"
    USER = "user"

    @classmethod
    def of(cls, is_root: bool) -> Scope:
        """The one rule: root -> system; anyone else -> user (a non-root user cannot write the system directory)."""
        return cls.SYSTEM if is_root else cls.USER

    @property
    def other(self) -> Scope:
        return Scope.USER if self is Scope.SYSTEM else Scope.SYSTEM

    @property
    def boot_target(self) -> str:
        """The target a unit of this scope is wanted by, to start at boot (system) or at login (user)."""
        return "multi-user.target" if self is Scope.SYSTEM else "default.target"


def default_scope() -> Scope:
    """This invocation's scope by ``Scope.of`` (whoever runs it: ``invocation.current``)."""
    return Scope.of(current().is_root)


def resolve_scope(user: bool, system: bool) -> Scope:
    """The scope a command's --user/--system flags mean; neither: ``default_scope``."""
    if user and system:
        raise UsageError("--user and --system exclude each other")
    if user:
        return Scope.USER
    if system:
        if not current().is_root:
            raise UsageError("--system needs root", fix="run as root, or use --user")
        return Scope.SYSTEM
    return default_scope()


# --- directories -----------------------------------------------------------------------------------

SYSTEM_UNIT_DIR = Path("/etc/containers/systemd")
USER_UNIT_SUBDIR = Path("containers/systemd")  # under $XDG_CONFIG_HOME (default ~/.config)
# where each manager reads plain unit files an administrator wrote (rigctl's canary timers go there)
SYSTEM_SYSTEMD_DIR = Path("/etc/systemd/system")
USER_SYSTEMD_SUBDIR = Path("systemd/user")  # under $XDG_CONFIG_HOME


def install_dir(scope: Scope, *, config_home: Path | None = None) -> Path:
    """Where quadlet looks for units: system /etc/containers/systemd/, user
    $XDG_CONFIG_HOME/containers/systemd/ (~/.config/... when unset)."""
    if scope == Scope.SYSTEM:  # by value: a plain "system" from an older caller means the same
        return SYSTEM_UNIT_DIR
    return (config_home or current().config_home) / USER_UNIT_SUBDIR


def install_path(scope: Scope, name: str, *, config_home: Path | None = None) -> Path:
    return install_dir(scope, config_home=config_home) / name


def quadlet_service(container_file: str) -> str:
    """The service quadlet generates from ``NAME.container`` when the file gives no ``ServiceName=`` (rigctl's
    never do): ``NAME.service``. ``host.unit.Unit.service`` reads a ServiceName= too."""
    return container_service(container_file.rsplit("/", 1)[-1].removesuffix(".container"))


def container_service(container: str) -> str:
    """The service of rigctl's container ``NAME`` (its quadlet file is ``NAME.container``): ``NAME.service``."""
    return f"{container}.service"


def quadlet_file(service: str) -> str:
    """The ``.container`` file rigctl writes for ``service`` (``quadlet_service`` read back)."""
    return service.removesuffix(".service") + ".container"


def state_dir(scope: Scope) -> Path:
    """One JSON record per deployment: what was installed, where it answers, the last failure's output."""
    if scope == Scope.SYSTEM:
        return Path("/var/lib/rigctl/deployments")
    return current().state_home / "rigctl" / "deployments"


# Each rigctl unit's engine log, below the state directory of the manager that runs it (systemd's %S:
# /var/lib for the system manager, the user manager's state home for a user's: ``invocation.named_dir``). The
# rendered unit names it (StateDirectory=, --log-opt path=%S/ENGINE_LOG_SUBDIR/%N.log); it outlives --rm.
ENGINE_LOG_SUBDIR = "rigctl/logs"


# The engine's caches (torch.compile, Triton, FlashInfer autotune) outlive its container the same way: the unit
# names a directory per image digest and GPU under the manager's cache directory (CacheDirectory=, %C) and
# mounts it at ENGINE_CACHE_MOUNT.
ENGINE_CACHE_SUBDIR = "rigctl/engine-cache"
ENGINE_CACHE_MOUNT = "/var/cache/rigctl-engine"


def engine_cache_root(scope: Scope, manager_env: dict[str, str] | None = None) -> Path:
    """Where ``scope``'s manager keeps the engine caches (%C/ENGINE_CACHE_SUBDIR)."""
    if scope == Scope.SYSTEM:
        return Path("/var/cache") / ENGINE_CACHE_SUBDIR
    base = named_dir(manager_env or {}, "XDG_CACHE_HOME") or current().cache_home
    return base / ENGINE_CACHE_SUBDIR


def engine_log(scope: Scope, unit: str, manager_env: dict[str, str] | None = None) -> Path:
    """The engine log of ``unit`` (``NAME.service``). ``manager_env``: the user manager's environment,
    when it could be asked (it decides %S, and may differ from this shell's); else this login's."""
    stem = unit.removesuffix(".service")
    if scope == Scope.SYSTEM:
        return Path("/var/lib") / ENGINE_LOG_SUBDIR / f"{stem}.log"
    base = named_dir(manager_env or {}, "XDG_STATE_HOME") or current().state_home
    return base / ENGINE_LOG_SUBDIR / f"{stem}.log"


def lock_dir() -> Path:
    # Host-wide for root whatever the scope, so `up --user` and `up --system` of one recipe still exclude
    # each other; a plain user can only lock within their own runtime dir.
    me = current()
    if me.is_root:
        return Path("/run/rigctl/locks")
    return me.runtime_dir / "rigctl" / "locks"


@dataclass(frozen=True)
class Dirs:
    """The two directories a deployment writes: its unit files and rigctl's record of it."""

    units: Path
    state: Path

    @classmethod
    def of(cls, scope: Scope) -> Dirs:
        return cls(install_dir(scope), state_dir(scope))
