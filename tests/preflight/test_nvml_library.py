"""Without the NVML library, the GPU probe answers before importing pynvml (``nvml_library_loads``): the
answer must be the one pynvml's own nvmlInit() gives on this host, and a library that loads must still
go through pynvml."""

from __future__ import annotations

from collections.abc import Callable

import pynvml
import pytest

from rigctl.host import nvml_lib
from rigctl.host.nvml import probe_gpus
from rigctl.host.nvml_lib import LIBRARY_NOT_FOUND, nvml_library_loads


def test_no_library_is_what_pynvml_says(need: Callable[[bool, str], None]) -> None:
    need(not nvml_library_loads(), "this machine has the NVIDIA driver's NVML library")
    with pytest.raises(pynvml.NVMLError) as raised:
        pynvml.nvmlInit()
    assert f"{type(raised.value).__name__}: {raised.value}" == LIBRARY_NOT_FOUND
    inventory = probe_gpus()
    assert not inventory.available and inventory.error == LIBRARY_NOT_FOUND


def test_a_library_that_loads_goes_through_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml_lib, "NVML_LIBRARY", "libc.so.6")  # loads on any glibc host: the check passes it on
    assert nvml_library_loads()
    monkeypatch.setattr(nvml_lib, "load_pynvml", lambda: "pynvml asked")
    assert probe_gpus().error == "pynvml asked"
