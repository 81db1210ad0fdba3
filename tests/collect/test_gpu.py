"""nvidia-smi outputs as the collector reads them (through the evidence layer's parser)."""

from __future__ import annotations

from pathlib import Path

from bot.collect.gpu import from_nvidia_smi

SCENARIOS = Path(__file__).parent / "data" / "scenarios"


def _body(path: Path) -> str:
    return path.read_text().split("\n", 1)[1]  # line 1 names the source


def test_an_eight_gpu_host_with_many_processes_is_read_whole() -> None:
    query = "".join(f"{i}, GPU-{i}, NVIDIA H100 80GB HBM3, 81559, 100, 80900, 0, 30, 590.48.01\n"
                    for i in range(8))
    apps = "".join(f"GPU-{i % 8}, {1000 + i}, 512, python\n" for i in range(100))
    r = from_nvidia_smi(query, apps, None)
    assert len(r.gpus) == 8 and len(r.processes or []) == 100


def test_mig_table_and_unknown_utilization() -> None:
    mig = SCENARIOS / "mig"
    r = from_nvidia_smi(_body(mig / "query_gpu.txt"), _body(mig / "apps.txt"),
                        _body(mig / "table.txt"))
    parent = [g for g in r.gpus if g.mig_instance is None]
    assert len(parent) == 1 and parent[0].utilization_pct is None
    assert len([g for g in r.gpus if g.mig_instance]) == 5
    assert (r.driver_version, r.cuda_version) == ("590.48.01", "13.1")
    assert [p.pid for p in r.processes or []] == [12249, 12250, 12267]  # CSV rows, not twice


def test_idle_gpu_and_a_failed_process_query() -> None:
    healthy = SCENARIOS / "healthy"
    assert from_nvidia_smi(_body(healthy / "query_gpu.txt"), "", None).processes == []
    # no CSV: the table's process rows are the fallback; neither: unknown, not "none"
    table_only = from_nvidia_smi(None, None, _body(healthy / "table.txt"))
    assert [p.pid for p in table_only.processes or []] == [2412]
    assert from_nvidia_smi(None, None, None).processes is None


def test_inforom_warning_keeps_the_rows() -> None:
    query = ("0, GPU-0, NVIDIA A100-SXM4-80GB, 81920, 100, 81000, 0, 30, 535.183.01\n"
             "WARNING: infoROM is corrupted at gpu 0000:0B:00.0\n")
    [gpu] = from_nvidia_smi(query, "", None).gpus
    assert gpu.total_mib == 81920
