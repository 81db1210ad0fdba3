"""Who holds the memory in a CUDA OOM message: the server itself, or another process.

Real messages (cited) in every wording; the assertion is what the answer builds on: which
PIDs are someone else's, and how much they hold.
"""

from __future__ import annotations

from bot.evidence import extract_facts

OTHER = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
         "total capacity of 79.15 GiB of which 5.12 MiB is free. Process 4242 has 40.00 GiB "
         "memory in use. Including non-PyTorch memory, this process has 39.13 GiB memory in "
         "use. Of the allocated memory 38.2 GiB is allocated by PyTorch, and 100 MiB is reserved "
         "by PyTorch but unallocated.")
# vllm#8903, inside docker: the worker's own PID is listed as "Process 78729"
CONTAINER = ("(VllmWorkerProcess pid=214) ERROR 09-27 05:20:38 multiproc_worker_utils.py:233] "
             "Exception in worker VllmWorkerProcess while processing method "
             "determine_num_available_blocks: CUDA out of memory. Tried to allocate 19.63 GiB. "
             "GPU 3 has a total capacity of 79.15 GiB of which 17.73 GiB is free. Process 78729 "
             "has 61.41 GiB memory in use. Of the allocated memory 56.64 GiB is allocated by "
             "PyTorch, and 4.07 GiB is reserved by PyTorch but unallocated.")
# vllm#34643: two small tenants and the engine itself
SEVERAL = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.71 GiB. GPU 0 has a "
           "total capacity of 22.30 GiB of which 1.52 GiB is free. Process 29153 has 248.00 MiB "
           "memory in use. Process 162529 has 248.00 MiB memory in use. Process 162519 has 20.28 "
           "GiB memory in use. Of the allocated memory 19.55 GiB is allocated by PyTorch, and "
           "244.94 MiB is reserved by PyTorch but unallocated.")
# vllm#19445, the message re-flowed one clause per line
REFLOWED = """torch.OutOfMemoryError: CUDA out of memory.
Tried to allocate 252.00 MiB. GPU 0 has a total capacity of 10.57 GiB of which 163.12 MiB is free.
Process 2073789 has 10.41 GiB memory in use.
Of the allocated memory 9.67 GiB is allocated by PyTorch,
with 299.88 MiB allocated in private pools (e.g., CUDA Graphs),
and 26.44 MiB is reserved by PyTorch but unallocated."""
# vllm#783, torch <= 2.0: no process named, but 16 GiB is neither free nor PyTorch's
OLD = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.63 GiB (GPU 0; "
       "44.56 GiB total capacity; 27.91 GiB already allocated; 565.31 MiB free; 27.93 GiB "
       "reserved in total by PyTorch)")


def listed(text: str) -> dict[int, tuple[float, bool | None]]:
    f = extract_facts(text)
    return {p.pid: (round((p.used_mib or 0) / 1024, 2), p.is_server) for p in f.processes
            if p.pid is not None}


def test_this_process_is_the_server_and_the_process_line_someone_else() -> None:
    f = extract_facts(OTHER)
    assert listed(OTHER) == {4242: (40.0, False)}
    assert f.oom_process_in_use_gib == 39.13
    assert f.foreign_processes_gib == 40.0


def test_in_a_container_the_only_process_that_large_is_the_server() -> None:
    assert listed(CONTAINER) == {78729: (61.41, True)}
    assert extract_facts(CONTAINER).foreign_processes_gib == 0.0


def test_of_several_lines_the_server_is_the_one_holding_pytorchs_memory() -> None:
    assert listed(SEVERAL) == {29153: (0.24, False), 162529: (0.24, False),
                               162519: (20.28, True)}
    assert round(extract_facts(SEVERAL).foreign_processes_gib or 0, 2) == 0.48


def test_a_message_re_flowed_over_lines_is_read_as_one() -> None:
    assert listed(REFLOWED) == {2073789: (10.41, True)}
    f = extract_facts(REFLOWED)
    assert (f.gpu_total_gib, f.oom_allocated_gib) == (10.57, 9.67)


def test_old_torch_memory_outside_pytorch() -> None:
    f = extract_facts(OLD)
    assert f.processes == []
    assert (f.oom_allocated_gib, f.oom_reserved_gib) == (27.91, 27.93)
    assert round(f.oom_outside_pytorch_gib or 0, 2) == 16.08


def test_each_ranks_message_is_judged_on_its_own() -> None:
    # two ranks of one server, each listing itself (in a container): nobody else is there
    rank1 = CONTAINER.replace("Process 78729", "Process 78730").replace("GPU 3", "GPU 2")
    got = listed(CONTAINER + "\n" + rank1)
    assert got == {78729: (61.41, True), 78730: (61.41, True)}


# Qwen3-VL#1224: the message cut before PyTorch's own figures, six processes on a 24 GB card
CUT = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 418.00 MiB. GPU 0 has a "
       "total capacity of 23.69 GiB of which 193.25 MiB is free. Process 1254 has 730.00 MiB "
       "memory in use. Process 1243 has 424.00 MiB memory in use. Process 1349 has 800.00 MiB "
       "memory in use. Process 1348 has 3.70 GiB memory in use. Process 1892152 has 2.96 GiB "
       "memory in use. Process 2167142 has 14.90 GiB memory in use.")


def test_cut_before_pytorchs_figures_the_largest_of_several_is_the_server() -> None:
    got = listed(CUT)
    assert got[2167142] == (14.9, True)
    assert {pid for pid, (_, server) in got.items() if server is False} == {
        1254, 1243, 1349, 1348, 1892152}
    assert round(extract_facts(CUT).foreign_processes_gib or 0, 2) == 8.57
    # one process alone, with nothing to compare it to, may be either
    one = CUT.split(" Process 1243")[0]
    assert listed(one) == {1254: (0.71, None)}
