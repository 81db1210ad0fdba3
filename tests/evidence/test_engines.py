"""SGLang, TGI and PyTorch OOM lines."""

from __future__ import annotations

from typing import Any

import pytest

from bot.evidence import extract_facts

MIB = 1 / 1024

CASES: list[tuple[str, dict[str, Any]]] = [
    # SGLang
    ("[2025-06-01 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
     "avail mem=62.23 GB, mem usage=14.99 GB.",
     {"engine": "sglang", "dtype": "bfloat16", "weights_gib": 14.99, "free_memory_gib": 62.23}),
    ("[TP0] max_total_tokens=200000 is larger than the profiled value -1234. Use the profiled "
     "value instead.", {"engine": "sglang", "max_total_tokens": 200000, "kv_cache_tokens": -1234}),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
     {"engine": "sglang"}),
    ("[TP0] KV Cache is allocated. #tokens: 512000, K size: 30.5 GB, V size: 30.5 GB",
     {"engine": "sglang", "kv_cache_tokens": 512000}),
    ("max_total_num_tokens=431302, chunked_prefill_size=8192, max_prefill_tokens=16384, "
     "max_running_requests=4097, context_len=131072", {"kv_cache_tokens": 431302,
                                                       "max_model_len": 131072}),
    # TGI
    ("text-generation-inference: 1.3.3", {"engine": "tgi", "engine_version": "1.3.3"}),
    ("INFO text_generation_router: router/src/main.rs:1] Setting max batch total tokens to 4512",
     {"engine": "tgi", "kv_cache_tokens": 4512}),
    ("RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to decrease "
     "`--max-batch-prefill-tokens`", {"max_batch_prefill_tokens": 4096}),
    ('Unable to warmup model: Generation("Allocation on device 0 would exceed allowed memory. '
     "(out of memory)\\nCurrently allocated     : 16.08 GiB\\nRequested               : 4.83 GiB"
     "\\nDevice limit            : 22.20 GiB\\nFree (according to CUDA): 11.12 MiB\\n\")",
     {"oom_gpu_index": 0, "oom_allocated_gib": 16.08, "oom_tried_to_allocate_gib": 4.83,
      "gpu_total_gib": 22.2, "oom_free_gib": 11.12 * MIB}),
    ("Allocation on device 1 would exceed allowed memory. (out of memory)\n"
     "Currently allocated     : 16.08 GiB\nRequested               : 4.83 GiB\n"
     "Device limit            : 22.20 GiB\nFree (according to CUDA): 11.12 MiB",
     {"oom_gpu_index": 1, "oom_allocated_gib": 16.08, "oom_tried_to_allocate_gib": 4.83,
      "gpu_total_gib": 22.2, "oom_free_gib": 11.12 * MIB}),
    ("Requested : 5 GiB for the shared pool", {"oom_tried_to_allocate_gib": None}),
    # PyTorch, every wording
    ("CUDA out of memory. Tried to allocate 160.00 MiB (GPU 0; 79.35 GiB total capacity; 78.58 "
     "GiB already allocated; 145.19 MiB free; 78.58 GiB reserved in total by PyTorch)",
     {"oom_tried_to_allocate_gib": 160 * MIB, "oom_gpu_index": 0, "gpu_total_gib": 79.35,
      "oom_free_gib": 145.19 * MIB, "oom_allocated_gib": 78.58, "oom_reserved_gib": 78.58}),
    ("Server error: CUDA out of memory. Tried to allocate 42.00 MiB. GPU 0 has a total capacty of "
     "39.39 GiB of which 31.94 MiB is free. Process 7529 has 39.23 GiB memory in use.",
     {"oom_tried_to_allocate_gib": 42 * MIB, "gpu_total_gib": 39.39,
      "oom_free_gib": 31.94 * MIB, "oom_process_in_use_gib": None}),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 3 has a total "
     "capacity of 184.00 GiB of which 2.21 GiB is free. Including non-PyTorch memory, this "
     "process has 181.77 GiB memory in use.",
     {"oom_tried_to_allocate_gib": 4.0, "oom_gpu_index": 3, "gpu_total_gib": 184.0,
      "oom_free_gib": 2.21, "oom_process_in_use_gib": 181.77}),
    ("Tried to allocate 2.00 MiB. GPU 6 has a total capacity of 44.53 GiB of which 448.00 KiB is "
     "free.", {"oom_free_gib": 448 / 2**20, "oom_gpu_index": 6}),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory.\nTried to allocate 23.04 GiB (GPU 0; 23.52 "
     "GiB total; 0 bytes free)",
     {"oom_tried_to_allocate_gib": 23.04, "gpu_total_gib": 23.52, "oom_free_gib": 0.0,
      "oom_gpu_index": 0}),
    ("Running Llama 3 70B on A100 GPU - Tried to allocate 160MiB. GPU",
     {"oom_tried_to_allocate_gib": 160 * MIB, "model": "Llama 3 70B", "gpu_name": "A100"}),
    # one "Process N" line that accounts for all the memory not free is the failing process:
    # what its PyTorch allocator does not hold is the engine's own pool
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
     "capacity of 79.15 GiB of which 1.15 GiB is free. Process 4242 has 78.00 GiB memory in use. "
     "Of the allocated memory 40.00 GiB is allocated by PyTorch, and 2.00 GiB is reserved by "
     "PyTorch but unallocated.",
     {"oom_process_outside_pytorch_gib": 36.0, "oom_reserved_gib": 42.0}),
    # two processes: neither is known to be the server, and nothing is deduced
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
     "capacity of 79.15 GiB of which 1.15 GiB is free. Process 4242 has 40.00 GiB memory in use. "
     "Process 777 has 38.00 GiB memory in use. Of the allocated memory 30.00 GiB is allocated by "
     "PyTorch, and 2.00 GiB is reserved by PyTorch but unallocated.",
     {"oom_process_outside_pytorch_gib": None, "oom_outside_pytorch_gib": 46.0}),
    # torch_npu (vllm-ascend#1670): NPU, and "current active" before the free figure; 56 GiB
    # of the card are outside this process's PyTorch memory
    ("RuntimeError: NPU out of memory. Tried to allocate 88.00 MiB (NPU 0; 60.96 GiB total "
     "capacity; 4.24 GiB already allocated; 4.24 GiB current active; 7.47 MiB free; 4.37 GiB "
     "reserved in total by PyTorch)",
     {"gpu_total_gib": 60.96, "oom_allocated_gib": 4.24, "oom_reserved_gib": 4.37,
      "oom_outside_pytorch_gib": pytest.approx(56.58, abs=0.01)}),
    # Intel's XPU build (ipex-llm#12080) gives no free figure
    ("RuntimeError: XPU out of memory. Tried to allocate 130.00 MiB (GPU 0; 15.11 GiB total "
     "capacity; 11.09 GiB already allocated; 11.23 GiB reserved in total by PyTorch)",
     {"gpu_total_gib": 15.11, "oom_allocated_gib": 11.09, "oom_reserved_gib": 11.23,
      "oom_free_gib": None}),
    # lmdeploy by its log prefix and by its command; in a sentence only as a default
    ("[TM][WARNING] `session_len` truncated to 4928 due to limited KV cache memory",
     {"engine": "lmdeploy"}),
    ("lmdeploy serve api_server internlm/internlm2_5-7b-chat --tp 2", {"engine": "lmdeploy"}),
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[c[0][:50] for c in CASES])
def test_figures(text: str, expected: dict[str, Any]) -> None:
    facts = extract_facts(text)
    for name, value in expected.items():
        got = getattr(facts, name)
        if isinstance(value, float):
            assert got == pytest.approx(value, rel=1e-9), name
        else:
            assert got == value, name


def test_oom_total_does_not_override_the_log() -> None:
    text = ("the current vLLM instance can use total_gpu_memory (79.19GiB) x "
            "gpu_memory_utilization "
            "(0.90) = 71.27GiB\nTried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 "
            "GiB of which 1.00 GiB is free.")
    assert extract_facts(text).gpu_total_gib == 79.19


def test_later_oom_wins() -> None:
    text = ("Tried to allocate 42.00 MiB. GPU 0 has a total capacty of 39.39 GiB of which 31.94 "
            "MiB is free.\nTried to allocate 222.00 MiB. GPU 1 has a total capacty of 39.39 GiB "
            "of which 217.94 MiB is free.")
    facts = extract_facts(text)
    assert facts.oom_tried_to_allocate_gib == pytest.approx(222 * MIB)
    assert facts.oom_gpu_index == 1


@pytest.mark.parametrize(("text", "gpu", "count", "model"), [
    ("Running Llama 3 70B on A100 GPU - Tried to allocate 160MiB", "A100", None, "Llama 3 70B"),
    ("I was testing with AWS G5.48xl machine with A10G GPU (24GB each).", "A10G", None, None),
    ("- GPU: 3x NVIDIA RTX 4090 24 GB", "NVIDIA RTX 4090 24 GB", 3, None),
    ("serving Qwen2.5-7B-Instruct on 4x A100-SXM4 80GB", "A100-SXM4 80GB", 4, "Qwen2.5-7B"),
    ("llm = TheBloke/Llama-2-70B-AWQ on a Tesla T4 machine", "Tesla T4", None,
     "TheBloke/Llama-2-70B-AWQ"),
    ("cannot run on H100", "H100", None, None),
    ("Load Llama 3.1 70B on two A100 80GB GPUs with vLLM's default settings", "A100 80GB", 2,
     "Llama 3.1 70B"),
    ("L2 cache misses in /vllm/model_executor/models/llama.py", None, None, None),
])
def test_prose_mentions(text: str, gpu: str | None, count: int | None, model: str | None) -> None:
    facts = extract_facts(text)
    assert (facts.gpu_name, facts.gpu_count, facts.model) == (gpu, count, model)


@pytest.mark.parametrize(("text", "count", "total"), [
    # Chinese counters and numerals, and each card's memory said with it
    ("我用四张80g显卡，使用qwen2vl官方仓库提供的vllm脚本，但是一直爆显存", 4, 80.0),
    ("用8卡跑还是报错", 8, None),
    ("打算在一张4090上部署两个qwen3-0.6b的模型接口", 1, None),
    ("我们输入三张1920*1080的图像时，出现了这个错误", None, None),  # three images
    ("48GB显存load internlm-chat-20b-pytorch-20b 失败", None, 48.0),
    ("I have two 24G cards and a 24GB GPU", None, 24.0),
    # Qwen2-57B-A14B-Instruct discussion 3: the memory after the word for it
    ("我的设备是6张显卡,每张卡显存22G,可是执行下面语句的时候报错:", 6, 22.0),
    # a metrics line's percentage and a size in a path are not a card's memory
    ("GPU KV cache usage: 41.3%, 2048 tokens", None, None),
    ("/data/models/qwen-7b-chat-int4-4G/", None, None),
])
def test_prose_gpu_count_and_memory(text: str, count: int | None, total: float | None) -> None:
    facts = extract_facts(text)
    assert (facts.gpu_count, facts.gpu_total_gib) == (count, total)


@pytest.mark.parametrize(("text", "needed"), [
    ("Our application needs 65536 tokens of context, what should we set?", 65536),
    ("we need at least 32k context for RAG", 32768),
    ("It requires a context length of 128k.", 131072),
    ("Our agents need 100k tokens of context", 100000),
    ("我们的业务需要32k上下文", 32768),
    # not a need: a denial, a count of GPUs, memory, and the log's own words
    ("We don't need 128k context, 8k is plenty", None),
    ("I need 2 GPUs for this model", None),
    ("it needs 40 GB of memory", None),
    ("ERROR 11-30 [core.py:586] ValueError: To serve at least one request with the model's max "
     "seq len (131072), (16.00 GiB KV cache is needed", None),
])
def test_the_length_the_application_needs_said_in_words(text: str, needed: int | None) -> None:
    assert extract_facts(text).needed_max_model_len == needed


def test_prose_never_overrides_the_evidence() -> None:
    text = ("Running Llama 3 70B on A100 GPU\nvllm serve meta-llama/Llama-3.1-70B -tp 2\n"
            "|   0  NVIDIA H100 80GB HBM3          On  | 00000000:C3:00.0 Off |"
            "                    0 |\n")
    facts = extract_facts(text)
    assert (facts.model, facts.gpu_name) == ("meta-llama/Llama-3.1-70B", "NVIDIA H100 80GB HBM3")
