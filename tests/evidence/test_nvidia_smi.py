"""Real nvidia-smi outputs (tests/evidence/data/nvidia-smi, first line names the source)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.evidence import extract_facts
from bot.schema import Facts, GpuInfo

DATA = Path(__file__).parent / "data" / "nvidia-smi"


def output(name: str) -> str:
    """The recorded output, without the `source:` line."""
    return DATA.joinpath(name).read_text().split("\n", 1)[1]


def physical(facts: Facts) -> list[GpuInfo]:
    return [g for g in facts.gpus if g.mig_instance is None]


def test_table_h200_with_processes() -> None:
    facts = extract_facts(output("table_h200_590.48.01_with_processes.txt"))
    (gpu,) = facts.gpus
    assert (gpu.index, gpu.name, gpu.bus_id) == (0, "NVIDIA H200", "00000000:83:00.0")
    assert (gpu.used_mib, gpu.total_mib, gpu.utilization_pct) == (32362, 143771, 100)
    assert gpu.mig_mode == "Disabled"
    assert (facts.driver_version, facts.cuda_version) == ("590.48.01", "13.1")
    assert (facts.gpu_name, facts.gpu_count) == ("NVIDIA H200", 1)
    assert facts.gpu_total_gib == pytest.approx(143771 / 1024)
    assert facts.gpu_used_gib == pytest.approx(32362 / 1024)
    procs = {(p.pid, p.name, p.used_mib, p.gpu_index) for p in facts.processes}
    assert procs == {(10291, "/root/tools/memhog", 2566, 0), (10293, "/root/tools/memhog", 1542, 0),
                     (10309, "./gpu_burn", 28234, 0)}
    assert all(p.is_server is False for p in facts.processes)
    assert facts.foreign_processes_gib == pytest.approx((2566 + 1542 + 28234) / 1024)


def test_table_idle_says_no_foreign_memory() -> None:
    facts = extract_facts(output("table_h200_590.48.01_no_running_processes.txt"))
    assert facts.processes == []
    assert facts.foreign_processes_gib == 0.0
    assert facts.gpu_used_gib == 0.0


def test_table_450_gi_ci_columns_and_python_processes() -> None:
    facts = extract_facts(output("table_450.57_processes_gi_ci_columns.txt"))
    assert [(g.index, g.name, g.used_mib, g.total_mib) for g in facts.gpus] == [
        (0, "GeForce RTX 2070", 749, 7981), (1, "GeForce GTX 750 Ti", 871, 2002)]
    assert facts.gpu_count == 2
    assert facts.gpu_name == "GeForce GTX 750 Ti"  # the smallest GPU limits a sharded server
    assert len(facts.processes) == 6
    matlab = next(p for p in facts.processes if p.pid == 4755)
    assert (matlab.name, matlab.used_mib, matlab.gpu_index) == (
        "...matlab94/bin/glnxa64/MATLAB", 3, 1)
    assert matlab.is_server is False
    # bare `python` may be the server; only the certainly-foreign MATLAB counts
    assert {p.is_server for p in facts.processes if p.name and "python" in p.name} == {None}
    assert facts.foreign_processes_gib == pytest.approx(3 / 1024)


def test_table_in_container_without_pids() -> None:
    facts = extract_facts(output("table_440.82_in_container_pids_not_visible.txt"))
    assert [(g.index, g.name, g.used_mib, g.total_mib, g.utilization_pct) for g in facts.gpus] == [
        (0, "GeForce GTX 108...", 10916, 11175, 59), (1, "GeForce GTX 108...", 149, 11178, 0)]
    assert (facts.driver_version, facts.cuda_version) == ("440.82", "10.2")
    assert facts.processes == []
    assert facts.foreign_processes_gib is None  # an empty block is "cannot see", not "none"


def test_table_mig() -> None:
    facts = extract_facts(output("table_h200_mig_590.48.01_with_processes.txt"))
    (gpu,) = physical(facts)
    assert gpu.utilization_pct is None  # N/A under MIG, not 0
    assert gpu.mig_mode == "Enabled"
    slices = [g for g in facts.gpus if g.mig_instance]
    assert [(g.index, g.parent_index, g.mig_instance, g.used_mib, g.total_mib) for g in slices] == [
        (0, 0, "GI 2/CI 0", 16925, 71424), (1, 0, "GI 2/CI 1", 16925, 71424),
        (2, 0, "GI 3/CI 0", 17, 33280), (3, 0, "GI 9/CI 0", 9, 16384),
        (4, 0, "GI 10/CI 0", 9, 16384)]
    assert facts.gpu_count == 1
    assert {p.pid for p in facts.processes} == {12249, 12250, 12267}


def test_csv_with_header_and_units() -> None:
    facts = extract_facts("$ nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,"
                          "memory.free,utilization.gpu,temperature.gpu,driver_version "
                          "--format=csv\n"
                          + output("query_gpu_h200_load_csv.txt"))
    (gpu,) = facts.gpus
    assert (gpu.index, gpu.name, gpu.total_mib, gpu.used_mib, gpu.free_mib, gpu.utilization_pct) \
        == (0, "NVIDIA H200", 143771, 32362, 110796, 100)
    assert gpu.uuid == "GPU-00000000-0000-0000-0000-000000000000"
    assert facts.driver_version == "590.48.01"


@pytest.mark.parametrize("name", ["query_gpu_h200_mig_load_csv.txt",
                                  "query_gpu_h200_mig_idle_csv.txt"])
def test_csv_na_is_unknown(name: str) -> None:
    (gpu,) = extract_facts(output(name)).gpus
    assert gpu.utilization_pct is None
    assert gpu.total_mib == 143771


def test_csv_without_header_needs_the_command() -> None:
    rows = output("query_gpu_h200_load_csv_noheader_nounits.txt")
    assert extract_facts(rows).gpus == []  # columns unknown: not guessed
    command = ("nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free,"
               "utilization.gpu,temperature.gpu,driver_version --format=csv,noheader,nounits\n")
    (gpu,) = extract_facts(command + rows).gpus
    assert (gpu.index, gpu.name, gpu.total_mib, gpu.used_mib, gpu.utilization_pct) == (
        0, "NVIDIA H200", 143771, 32362, 100)


NOHEADER = sorted(p.name for p in DATA.glob("query_gpu_*_noheader_nounits.txt"))


@pytest.mark.parametrize("name", NOHEADER)
def test_every_noheader_capture_reads_with_its_command(name: str) -> None:
    command = ("nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free,"
               "utilization.gpu,temperature.gpu,driver_version --format=csv,noheader,nounits\n")
    with_header = name.replace("_noheader_nounits", "")
    (gpu,) = extract_facts(command + output(name)).gpus
    assert gpu == extract_facts(output(with_header)).gpus[0]


def test_csv_na_and_not_supported_are_both_unknown() -> None:
    command = ("nvidia-smi --query-gpu=memory.total,memory.free,utilization.gpu,"
               "utilization.memory --format=csv,noheader,nounits\n")
    for token in ("[N/A]", "[Not Supported]"):
        (gpu,) = extract_facts(command + f"2004, 2004, {token}, 0\n").gpus
        assert gpu.utilization_pct is None
        assert (gpu.total_mib, gpu.free_mib) == (2004, 2004)
    # the recorded fixture itself: fan.speed is the unknown column, utilization is a real 0
    command = ("nvidia-smi --query-gpu=memory.total,memory.free,memory.used,temperature.gpu,"
               "fan.speed,utilization.gpu,utilization.memory --format=csv,noheader,nounits\n")
    (gpu,) = extract_facts(command + output("csv_nounits_na_vs_not_supported.txt")).gpus
    assert (gpu.total_mib, gpu.used_mib, gpu.utilization_pct) == (2004, 0, 0)


def test_compute_apps_csv() -> None:
    facts = extract_facts(output("csv_query_compute_apps_h200_590.48.01.txt"))
    assert {(p.pid, p.name, p.used_mib) for p in facts.processes} == {
        (10291, "/root/tools/memhog", 2566), (10293, "/root/tools/memhog", 1542),
        (10309, "./gpu_burn", 28234)}
    assert {p.gpu_uuid for p in facts.processes} == {"GPU-00000000-0000-0000-0000-000000000000"}
    command = ("nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid "
               "--format=csv,noheader,nounits\n")
    facts = extract_facts(command + output("query_compute_apps_h200_load_csv_noheader_nounits.txt"))
    assert sorted(p.used_mib or 0 for p in facts.processes) == [1542, 2566, 28234]


def test_compute_apps_header_only_means_nothing_runs() -> None:
    facts = extract_facts(output("query_compute_apps_h200_idle_csv.txt"))
    assert facts.processes == []
    assert facts.foreign_processes_gib == 0.0


def test_server_processes_are_not_foreign() -> None:
    table = output("table_h200_590.48.01_with_processes.txt").replace(
        "./gpu_burn           ", "VLLM::EngineCore     ")
    facts = extract_facts(table)
    assert {p.name: p.is_server for p in facts.processes}["VLLM::EngineCore"] is True
    assert facts.foreign_processes_gib == pytest.approx((2566 + 1542) / 1024)


def test_after_a_startup_failure_every_process_is_foreign() -> None:
    table = output("table_h200_590.48.01_with_processes.txt").replace(
        "./gpu_burn           ", "VLLM::EngineCore     ")
    log = ("ValueError: Free memory on device (111.2/140.4 GiB) on startup is less than desired "
           "GPU memory utilization (0.9, 126.36 GiB).\n")
    facts = extract_facts(log + table)
    assert all(p.is_server is False for p in facts.processes)
    assert facts.foreign_processes_gib == pytest.approx((2566 + 1542 + 28234) / 1024)


def test_listings_and_templates() -> None:
    facts = extract_facts("0: NVIDIA GeForce RTX 5070 Ti 16303MiB\n1: NVIDIA GeForce RTX 5090 D "
                          "32607MiB\n")
    assert [(g.index, g.name, g.total_mib) for g in facts.gpus] == [
        (0, "NVIDIA GeForce RTX 5070 Ti", 16303), (1, "NVIDIA GeForce RTX 5090 D", 32607)]
    assert facts.gpu_count == 2
    facts = extract_facts("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234-abcd)\n"
                          "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-5678-abcd)\n")
    assert facts.gpu_count == 2
    assert facts.gpus[1].uuid == "GPU-5678-abcd"
    facts = extract_facts("- GPU type: NVIDIA GeForce RTX 4090\n- GPU number: 4\n"
                          "- GPU memory: 23.64GB\n")
    assert (facts.gpu_name, facts.gpu_count, facts.gpu_total_gib) == (
        "NVIDIA GeForce RTX 4090", 4, 23.64)


def test_partial_rows_pasted_in_prose() -> None:
    facts = extract_facts(
        "The GPU is in idle, with no memory allocated.\n"
        "|   0  NVIDIA H100 80GB HBM3          On  | 00000000:C3:00.0 Off |"
        "                    0 |\n"
        "| N/A   25C    P0              74W / 700W |      0MiB / 81559MiB |"
        "      0%      Default |\n")
    assert (facts.gpu_name, facts.gpu_total_gib, facts.gpu_used_gib) == (
        "NVIDIA H100 80GB HBM3", 81559 / 1024, 0.0)


def test_same_gpu_twice_is_one_gpu() -> None:
    row = ("NVIDIA RTX A6000, 00000000:01:00.0, 550.54.15, 49140 MiB, 48668 MiB, 1 MiB, 8.6\n")
    command = ("nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total,memory.free,"
               "memory.used,compute_cap\n\n")
    facts = extract_facts(command + row + row)
    assert facts.gpu_count == 1
    assert facts.compute_capability == "8.6"


# --------------------------------------------------------------------------- odd process names

_PIECES = ['python3 -c "a, b"', "x, y, z", "'quoted'", '"dq"', "a,b", ",", ", ", "12MiB",
           "N/A", "| pipe |", "модель", "GPU-0000", "  two  spaces", "C", "[N/A]", "0", "1 MiB",
           "worker   5120MiB", "--flag=1, --other", 'say "hi, there"']


def _odd_names(seed: int, count: int = 25) -> list[str]:
    import random

    rnd = random.Random(seed)
    names = [" ".join(rnd.choice(_PIECES) for _ in range(rnd.randint(1, 3))).strip()
             for _ in range(count)]
    # unquoted CSV cannot tell a name's own leading or trailing ", " from a separator, nor a
    # name in quotes from a quoted name, and a name that is only "N/A" reads as unknown:
    # those are not names a process has
    names = [n[:34].strip(" ,").lstrip('"') for n in names]
    return [n if n.strip("[]") not in ("", "N/A") else "python3" for n in names]


def _csv_forms(names: list[str]) -> dict[str, str]:
    uuid = "GPU-00000000-0000-0000-0000-000000000000"
    rows = [(1000 + i, n, 100 + i) for i, n in enumerate(names)]

    def quote(cell: str) -> str:
        return '"' + cell.replace('"', '""') + '"' if "," in cell or '"' in cell else cell

    return {
        # as nvidia-smi writes it: no quoting, ", " between cells
        "header": "pid, process_name, used_gpu_memory [MiB]\n"
                  + "".join(f"{p}, {n}, {m} MiB\n" for p, n, m in rows),
        # the collector's own query: the name last
        "collector": "$ nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory,process_name "
                     "--format=csv,noheader,nounits\n"
                     + "".join(f"{uuid}, {p}, {m}, {n}\n" for p, n, m in rows),
        # the name in the middle, before the uuid
        "middle": "$ nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid "
                  "--format=csv,noheader,nounits\n"
                  + "".join(f"{p}, {n}, {m}, {uuid}\n" for p, n, m in rows),
        # a spreadsheet's export: quoted where needed
        "quoted": "pid, process_name, used_gpu_memory [MiB]\n"
                  + "".join(f"{p}, {quote(n)}, {m} MiB\n" for p, n, m in rows),
    }


def _table(names: list[str]) -> str:
    head = output("table_h200_590.48.01_with_processes.txt").split("|    0   N/A  N/A")[0]
    rows = "".join(f"|    0   N/A  N/A  {1000 + i:>14}      C   {n:<34} {100 + i:>8}MiB |\n"
                   for i, n in enumerate(names))
    return head + rows + "+" + "-" * 89 + "+\n"


@pytest.mark.parametrize("seed", range(8))
def test_every_process_and_its_memory_is_kept_whatever_its_name(seed: int) -> None:
    names = _odd_names(seed)
    expected = {(1000 + i, n, 100.0 + i) for i, n in enumerate(names)}
    for form, text in [*_csv_forms(names).items(), ("table", _table(names))]:
        got = {(p.pid, p.name, p.used_mib) for p in extract_facts(text).processes}
        assert got == expected, form


def test_a_comma_in_one_name_keeps_the_rows_after_it() -> None:
    """The reported case: 50 GiB held by other processes was read as none."""
    csv_text = ("pid, process_name, used_gpu_memory [MiB]\n"
                "7001, python3 -c \"a, b\", 25600 MiB\n7002, /root/tools/memhog, 25600 MiB\n")
    facts = extract_facts(csv_text)
    assert [p.pid for p in facts.processes] == [7001, 7002]
    assert facts.foreign_processes_gib == pytest.approx(50.0)
