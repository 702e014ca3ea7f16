"""Fleet fixtures: real sshd instances on 127.0.0.1 (see sshd_hosts.py)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


def _load_helpers() -> ModuleType:
    # tests are not a package (pytest runs with --import-mode=importlib): load the helper by path
    name = "rigctl_test_sshd_hosts"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("sshd_hosts.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


sshd_hosts = _load_helpers()


@pytest.fixture(scope="module")
def ssh_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # a short base path: ssh control sockets must fit in a unix socket path
    with sshd_hosts.fleet_or_skip(tmp_path_factory.mktemp("fleet"), 3) as fleet:
        yield fleet


@pytest.fixture
def private_control_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], Path]]:
    """Point ssh control sockets at a fresh private dir for one test."""
    # short on purpose: a control socket path must fit in 108 bytes
    run_dir = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run_dir))
    yield lambda: run_dir / "rigctl" / "ssh"
    shutil.rmtree(run_dir, ignore_errors=True)
