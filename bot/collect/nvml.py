"""GPU state of this machine through NVML (the `pynvml` module of nvidia-ml-py).

The module is injected (`read_nvml(pynvml)`), so tests drive every path with a fake that raises
the real `pynvml.NVMLError_*` classes. NVML failures that are incidents (driver not loaded,
driver/library mismatch, GPU lost) become the same text nvidia-smi prints for them, so the
knowledge base matches them exactly as it matches a pasted nvidia-smi error. A missing library
(no NVIDIA driver on this machine at all) is not an incident: the caller falls back to
nvidia-smi and says so.
"""

from __future__ import annotations

import contextlib
from typing import Any

from bot.collect.gpu import GpuReading
from bot.schema import MIB, GpuInfo, GpuProcess

DRIVER_DOWN = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.")


def _init_failure(nv: Any, exc: Exception) -> str:
    """The line nvidia-smi prints when NVML fails this way (what the KB's signatures know)."""
    if isinstance(exc, nv.NVMLError_DriverNotLoaded):
        return DRIVER_DOWN
    if isinstance(exc, nv.NVMLError_LibRmVersionMismatch):
        return "Failed to initialize NVML: Driver/library version mismatch"
    return f"Failed to initialize NVML: {exc}"


def _lost(index: int) -> str:
    return (f"Unable to determine the device handle for GPU {index}: GPU is lost.  "
            "Reboot the system to recover this GPU")


def read_nvml(nv: Any) -> GpuReading:
    """Read every GPU, its memory, processes and MIG devices. Never raises NVMLError."""
    reading = GpuReading(source="NVML")
    try:
        nv.nvmlInit()
    except nv.NVMLError_LibraryNotFound as exc:
        raise NvmlUnavailable(f"NVML: {exc} (no NVIDIA driver library here)") from None
    except nv.NVMLError as exc:
        reading.lines.append(_init_failure(nv, exc))
        return reading
    try:
        reading.driver_version = _optional(nv, nv.nvmlSystemGetDriverVersion)
        cuda = _optional(nv, nv.nvmlSystemGetCudaDriverVersion_v2)
        if isinstance(cuda, int):
            reading.cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
        procs: list[GpuProcess] = []
        reading.processes = procs
        for i in range(nv.nvmlDeviceGetCount()):
            try:
                _device(nv, i, reading, procs)
            except nv.NVMLError_GpuIsLost:
                reading.lines.append(_lost(i))
            except nv.NVMLError as exc:
                reading.unread.append(f"GPU {i}: {exc}")
    except nv.NVMLError_GpuIsLost:
        reading.lines.append(_lost(0))
    except nv.NVMLError as exc:
        reading.unread.append(f"NVML: {exc}")
    finally:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
    return reading


class NvmlUnavailable(Exception):
    """libnvidia-ml is not on this machine: use nvidia-smi instead."""


def _optional(nv: Any, fn: Any, *args: Any) -> Any:
    """A value some GPUs or drivers do not have (NotSupported, FunctionNotFound): None."""
    try:
        return fn(*args)
    except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound, nv.NVMLError_NoPermission):
        return None


def _memory(nv: Any, handle: Any) -> Any:
    """v2 (used excludes driver-reserved memory, as nvidia-smi shows it), else v1."""
    try:
        return nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2)
    except (nv.NVMLError_FunctionNotFound, nv.NVMLError_NotSupported, TypeError):
        return nv.nvmlDeviceGetMemoryInfo(handle)


def _processes(nv: Any, handle: Any) -> list[Any]:
    """v3 where the driver has it (>= 510), v2 before."""
    try:
        return list(nv.nvmlDeviceGetComputeRunningProcesses(handle))
    except (nv.NVMLError_FunctionNotFound, nv.NVMLLibraryMismatchError):
        return list(nv.nvmlDeviceGetComputeRunningProcesses_v2(handle))


def _device(nv: Any, i: int, reading: GpuReading, procs: list[GpuProcess]) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(i)
    uuid = nv.nvmlDeviceGetUUID(h)
    mem = _memory(nv, h)
    util = _optional(nv, nv.nvmlDeviceGetUtilizationRates, h)
    mig = _optional(nv, nv.nvmlDeviceGetMigMode, h)
    mig_on = bool(mig) and mig[0] == nv.NVML_DEVICE_MIG_ENABLE
    reading.gpus.append(GpuInfo(
        index=i, name=nv.nvmlDeviceGetName(h), uuid=uuid,
        total_mib=round(mem.total / MIB, 1), used_mib=round(mem.used / MIB, 1),
        free_mib=round(mem.free / MIB, 1),
        utilization_pct=float(util.gpu) if util is not None else None,
        mig_mode=None if mig is None else ("Enabled" if mig_on else "Disabled")))
    for p in _processes(nv, h):
        used = p.usedGpuMemory
        procs.append(GpuProcess(gpu_index=i, gpu_uuid=uuid, pid=p.pid,
                                used_mib=round(used / MIB, 1) if used is not None else None))
    if mig_on:
        for j in range(nv.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except nv.NVMLError_NotFound:
                continue
            mm = _memory(nv, mh)
            reading.gpus.append(GpuInfo(
                index=j, parent_index=i, mig_instance=nv.nvmlDeviceGetUUID(mh),
                total_mib=round(mm.total / MIB, 1), used_mib=round(mm.used / MIB, 1),
                free_mib=round(mm.free / MIB, 1), mig_mode="Enabled"))


def load_pynvml() -> Any:
    """The real module; imported here only, so nothing else pays for it."""
    import pynvml

    return pynvml
