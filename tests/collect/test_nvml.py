"""NVML paths with a fake pynvml that raises the real `pynvml.NVMLError_*` classes, and the real
pynvml on this machine (no driver: LibraryNotFound, so the nvidia-smi fallback is used)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from bot.collect.nvml import DRIVER_DOWN, NvmlUnavailable, read_nvml
from bot.collect.runner import NO_DRIVER, check_hosts, collect_local

GIB = 1 << 30
STANDINS = Path(__file__).parent / "standins"
DATA = Path(__file__).parent / "data"


class FakeNvml:
    """The pynvml functions the collector calls, over a list of GPU dicts; errors are the real
    classes. `fail` maps a function name to the exception it raises."""

    NVMLError = pynvml.NVMLError
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE

    def __init__(self, gpus: list[dict[str, Any]], fail: dict[str, Exception] | None = None
                 ) -> None:
        self.gpus, self.fail = gpus, fail or {}
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVMLError_"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise self.fail[name]

    def nvmlInit(self) -> None:
        self._call("nvmlInit")

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        self._call("nvmlSystemGetDriverVersion")
        return "590.48.01"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 13010

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict[str, Any]:
        self._call(f"nvmlDeviceGetHandleByIndex:{i}")
        return self.gpus[i]

    def nvmlDeviceGetUUID(self, h: dict[str, Any]) -> str:
        return str(h["uuid"])

    def nvmlDeviceGetName(self, h: dict[str, Any]) -> str:
        return str(h["name"])

    def nvmlDeviceGetMemoryInfo(self, h: dict[str, Any], version: int | None = None) -> Any:
        if version is not None:
            self._call("nvmlDeviceGetMemoryInfo_v2")
            return SimpleNamespace(total=h["total"], free=h["free"], used=h["used"],
                                   reserved=h.get("reserved", 0))
        self._call("nvmlDeviceGetMemoryInfo_v1")  # v1's used includes the reserved memory
        return SimpleNamespace(total=h["total"], free=h["free"],
                               used=h["used"] + h.get("reserved", 0))

    def nvmlDeviceGetUtilizationRates(self, h: dict[str, Any]) -> Any:
        self._call("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=h["util"], memory=0)

    def nvmlDeviceGetMigMode(self, h: dict[str, Any]) -> list[int]:
        self._call("nvmlDeviceGetMigMode")
        if "migs" not in h:
            raise pynvml.NVMLError_NotSupported()
        return [1, 1]

    def nvmlDeviceGetComputeRunningProcesses(self, h: dict[str, Any]) -> list[Any]:
        self._call("nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in h["procs"]]

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: dict[str, Any]) -> list[Any]:
        self._call("nvmlDeviceGetComputeRunningProcesses_v2")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in h["procs"]]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: dict[str, Any]) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: dict[str, Any], j: int) -> Any:
        if j >= len(h["migs"]):
            raise pynvml.NVMLError_NotFound()
        return h["migs"][j]


H100 = {"uuid": "GPU-1", "name": "NVIDIA H100 80GB HBM3", "total": 80 * GIB, "free": 50 * GIB,
        "used": 30 * GIB, "reserved": GIB // 2, "util": 97,
        "procs": [(4242, 20 * GIB), (4300, 10 * GIB)]}


def test_reads_gpus_and_processes() -> None:
    r = read_nvml(FakeNvml([H100]))
    [g] = r.gpus
    assert (g.name, g.total_mib, g.used_mib, g.utilization_pct) == (
        "NVIDIA H100 80GB HBM3", 81920.0, 30720.0, 97.0)
    assert g.mig_mode is None  # NotSupported: not a MIG-capable GPU, not "Disabled"
    assert [(p.pid, p.used_mib, p.gpu_index) for p in r.processes or []] == [
        (4242, 20480.0, 0), (4300, 10240.0, 0)]
    assert (r.driver_version, r.cuda_version) == ("590.48.01", "13.1")
    assert not r.lines and not r.unread


def test_memory_v1_and_processes_v2_on_old_drivers() -> None:
    nv = FakeNvml([H100], fail={
        "nvmlDeviceGetMemoryInfo_v2": pynvml.NVMLError_FunctionNotFound(),
        "nvmlDeviceGetComputeRunningProcesses": pynvml.NVMLLibraryMismatchError("use _v2"),
    })
    r = read_nvml(nv)
    assert r.gpus[0].used_mib == 30720.0 + 512.0  # v1 counts the reserved memory as used
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in nv.calls
    assert len(r.processes or []) == 2


def test_mig_devices() -> None:
    mig = {**H100, "util": 0, "procs": [],
           "migs": [{"uuid": "MIG-a", "total": 40 * GIB, "free": 39 * GIB, "used": GIB},
                    {"uuid": "MIG-b", "total": 20 * GIB, "free": 20 * GIB, "used": 0}]}
    nv = FakeNvml([mig], fail={"nvmlDeviceGetUtilizationRates": pynvml.NVMLError_NotSupported()})
    r = read_nvml(nv)
    parent, a, b = r.gpus
    assert parent.mig_mode == "Enabled" and parent.utilization_pct is None
    assert (a.mig_instance, a.parent_index, a.total_mib) == ("MIG-a", 0, 40960.0)
    assert b.mig_instance == "MIG-b"


@pytest.mark.parametrize(("error", "line"), [
    (pynvml.NVMLError_LibRmVersionMismatch(),
     "Failed to initialize NVML: Driver/library version mismatch"),
    (pynvml.NVMLError_DriverNotLoaded(), DRIVER_DOWN),
    (pynvml.NVMLError_NoPermission(), "Failed to initialize NVML: Insufficient Permissions"),
])
def test_init_failures_become_the_text_nvidia_smi_prints(error: Exception, line: str) -> None:
    nv = FakeNvml([H100], fail={"nvmlInit": error})
    r = read_nvml(nv)
    assert r.lines == [line] and not r.gpus and r.processes is None


def test_gpu_lost_on_one_device() -> None:
    second = {**H100, "uuid": "GPU-2"}
    nv = FakeNvml([H100, second], fail={"nvmlDeviceGetHandleByIndex:1":
                                        pynvml.NVMLError_GpuIsLost()})
    r = read_nvml(nv)
    assert len(r.gpus) == 1
    assert r.lines == ["Unable to determine the device handle for GPU 1: GPU is lost.  "
                       "Reboot the system to recover this GPU"]
    assert nv.calls[-1] == "nvmlShutdown"


def test_library_not_found_is_not_an_incident() -> None:
    nv = FakeNvml([], fail={"nvmlInit": pynvml.NVMLError_LibraryNotFound()})
    with pytest.raises(NvmlUnavailable, match="NVML Shared Library Not Found"):
        read_nvml(nv)


def test_nvml_failure_is_diagnosed_as_driver_failure() -> None:
    nv = FakeNvml([H100], fail={"nvmlInit": pynvml.NVMLError_LibRmVersionMismatch()})
    snap = collect_local(time.monotonic() + 20, nv)
    assert "Driver/library version mismatch" in snap.evidence().text
    from bot.diagnose import diagnose
    from bot.kb.loader import load_kb

    d = diagnose(snap.evidence(), load_kb())
    assert d.problems and d.problems[0].id == "nvidia-driver-failure"


def test_this_machine_has_no_nvml_and_falls_back_to_nvidia_smi(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real pynvml here: no libnvidia-ml.so.1, so LibraryNotFound, then nvidia-smi (the
    stand-in, on PATH); the snapshot says what it could not read instead of failing."""
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    shutil.copy(STANDINS / "nvidia-smi", smi)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("INFERBOT_TEST_SCENARIO", str(DATA / "scenarios" / "kv"))
    [snap] = check_hosts(["localhost"], None, deadline_s=20)
    assert snap.method == "local" and snap.error is None
    assert snap.unread[0].startswith("NVML: NVML Shared Library Not Found")
    assert "read GPU state with nvidia-smi instead" in snap.unread[0]
    assert snap.commands[0].id == "nvidia-smi-query-gpu" and snap.commands[0].rc == 0
    assert snap.gpu is not None and snap.gpu.physical


def test_no_driver_at_all_is_one_line_saying_what_to_install(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Neither NVML nor nvidia-smi (this machine, with nothing added to PATH): nothing is run,
    and the reason says to install the driver."""
    monkeypatch.setenv("PATH", str(tmp_path))
    [snap] = check_hosts(["localhost"], None, deadline_s=20)
    assert snap.error == NO_DRIVER and "install the NVIDIA driver" in snap.error
    assert not snap.commands
