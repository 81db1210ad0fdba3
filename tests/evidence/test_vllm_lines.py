"""Every vLLM memory line of vllm-memory.md section 4 and the messages of vllm-messages.md give
the figures printed in them."""

from __future__ import annotations

from typing import Any

import pytest

from bot.evidence import extract_facts

CASES: list[tuple[str, dict[str, Any]]] = [
    # weights
    ("INFO 02-26 09:54:02 model_runner.py:1115] Loading model weights took 14.9888 GB",
     {"weights_gib": 14.9888, "engine_generation": "V0"}),
    ("INFO 04-05 [gpu_model_runner.py:1276] Model loading took 14.9889 GiB and 4.301554 seconds",
     {"weights_gib": 14.9889, "engine_generation": "V1"}),
    ("(EngineCore_DP0 pid=1) INFO [gpu_model_runner.py:2] Model loading took 15.25 GiB memory and "
     "12.5 seconds", {"weights_gib": 15.25}),
    # V0 ~0.6.4 summary
    ("INFO worker.py:232] Memory profiling results: total_gpu_memory=23.58GiB "
     "initial_memory_usage=15.28GiB peak_torch_memory=17.06GiB memory_usage_post_profile=15.63GiB "
     "non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90",
     {"gpu_total_gib": 23.58, "non_torch_gib": 0.35, "kv_cache_available_gib": 3.81,
      "gpu_memory_utilization": 0.9, "engine_generation": "V0"}),
    # V0 ~0.7-0.10 three lines
    ("INFO worker.py:267] Memory profiling takes 3.25 seconds\n"
     "INFO worker.py:267] the current vLLM instance can use total_gpu_memory (22.06GiB) x "
     "gpu_memory_utilization (0.90) = 19.85GiB\n"
     "INFO worker.py:267] model weights take 2.88GiB; non_torch_memory takes 0.05GiB; PyTorch "
     "activation peak memory takes 1.40GiB; the rest of the memory reserved for KV Cache is "
     "15.52GiB.",
     {"gpu_total_gib": 22.06, "gpu_memory_utilization": 0.9, "budget_gib": 19.85,
      "weights_gib": 2.88, "non_torch_gib": 0.05, "activation_peak_gib": 1.4,
      "kv_cache_available_gib": 15.52}),
    ("the current vLLM instance can use total_gpu_memory (8.00 GiB) x gpu_memory_utilization "
     "(0.70) = 5.60 GiB", {"gpu_total_gib": 8.0, "budget_gib": 5.6}),
    # V1 DEBUG profile
    ("DEBUG [gpu_worker.py:1] Memory profiling takes 5.1 seconds. Total non KV cache memory: "
     "17.11GiB; torch peak memory increase: 1.89GiB; non-torch forward increase memory: 0.23GiB; "
     "weights memory: 14.99GiB.",
     {"activation_peak_gib": 1.89, "non_torch_gib": 0.23, "weights_gib": 14.99}),
    # V1 budget (can be negative), format_gib spelling
    ("INFO [gpu_worker.py:227] Available KV cache memory: 9.97 GiB",
     {"kv_cache_available_gib": 9.97}),
    ("INFO [gpu_worker.py:227] Available KV cache memory: -2.14 GiB",
     {"kv_cache_available_gib": -2.14}),
    ("INFO [gpu_worker.py:227] Available KV cache memory: 22.5 GiB",
     {"kv_cache_available_gib": 22.5}),
    ("INFO Initial free memory 70.12 GiB, reserved 10.00 GiB memory for KV Cache as specified by "
     "kv_cache_memory_bytes config and skipped memory profiling. This does not respect the "
     "gpu_memory_utilization config.", {"kv_cache_available_gib": 10.0}),
    # blocks and tokens
    ("INFO llm_engine.py:275] # GPU blocks: 1952, # CPU blocks: 2048",
     {"gpu_blocks": 1952, "cpu_blocks": 2048, "kv_cache_tokens": 31232, "engine_generation": "V0"}),
    ("INFO executor_base.py:111] # cuda blocks: 0, # CPU blocks: 4681",
     {"gpu_blocks": 0, "cpu_blocks": 4681, "kv_cache_tokens": 0}),
    ("INFO executor_base.py:111] # CUDA blocks: 36332, # CPU blocks: 9362",
     {"gpu_blocks": 36332, "cpu_blocks": 9362}),
    ("INFO kv_cache_utils.py:1] # GPU blocks: 2666", {"gpu_blocks": 2666, "cpu_blocks": None,
                                                      "engine_generation": "V1"}),
    ("INFO [kv_cache_utils.py:1] GPU KV cache size: 661,808 tokens",
     {"kv_cache_tokens": 661808, "engine_generation": "V1"}),
    ("INFO [kv_cache_utils.py:1] Maximum concurrency for 32,768 tokens per request: 20.20x",
     {"concurrency_tokens": 32768, "max_concurrency": 20.2, "max_model_len": 32768}),
    ("INFO executor_base.py:116] Maximum concurrency for 4096 tokens per request: 0.00x",
     {"concurrency_tokens": 4096, "max_concurrency": 0.0}),
    ("INFO [kv_cache_utils.py:1] GPU KV cache size: 661,808 tokens, Maximum concurrency for 32,768 "
     "tokens per request: 20.20x",
     {"kv_cache_tokens": 661808, "concurrency_tokens": 32768, "max_concurrency": 20.2}),
    # a printed token count wins over blocks x block size
    ("# GPU blocks: 2666\nGPU KV cache size: 42,656 tokens", {"kv_cache_tokens": 42656}),
    ("vllm serve m --block-size 32\n# GPU blocks: 100, # CPU blocks: 5", {"kv_cache_tokens": 3200}),
    # CUDA graphs
    ("INFO model_runner.py:1562] Graph capturing finished in 5 secs, took 0.52 GiB",
     {"cuda_graph_gib": 0.52}),
    ("INFO [gpu_model_runner.py:1] Estimated CUDA graph memory: 1.25 GiB total",
     {"cuda_graph_gib": 1.25}),
    ("INFO CUDA graph pool memory: 0.91 GiB (actual), 1.25 GiB (estimated), difference: 0.34 GiB",
     {"cuda_graph_gib": 0.91}),
    # start-up check and the 2026 breakdown
    ("ValueError: Free memory on device (31.44/47.38 GiB) on startup is less than desired GPU "
     "memory utilization (0.95, 45.01 GiB). Decrease GPU memory utilization or reduce GPU memory "
     "used by other processes.",
     {"free_memory_gib": 31.44, "gpu_total_gib": 47.38, "gpu_memory_utilization": 0.95,
      "requested_memory_gib": 45.01, "engine_generation": "V1"}),
    ("ValueError: Free memory on device (3.22/4.0 GiB) on startup is less than desired GPU memory "
     "utilization (0.9, 3.6 GiB).",
     {"free_memory_gib": 3.22, "gpu_total_gib": 4.0, "gpu_memory_utilization": 0.9,
      "requested_memory_gib": 3.6}),
    ("ValueError: Free memory on device cuda:0 (22.65/79.18 GiB) on startup is less than desired "
     "GPU memory utilization (0.92, 72.85 GiB).",
     {"free_memory_gib": 22.65, "gpu_total_gib": 79.18, "gpu_memory_utilization": 0.92,
      "requested_memory_gib": 72.85}),
    ("ValueError: Free memory on device xpu:0 (0.22/30.3 GiB) on startup is less than desired GPU "
     "memory utilization (0.9, 27.27 GiB).", {"free_memory_gib": 0.22, "gpu_total_gib": 30.3}),
    # amd-strix-halo-vllm-toolboxes#16: another build's wording of the same check
    ("(EngineCore_DP0 pid=727) ERROR 02-12 15:44:57 [core.py:966] ValueError: Available memory on "
     "device cuda:0 (28.49/124.0 GiB) is below required GPU memory utilization (0.95, 117.8 GiB). "
     "Reduce GPU memory utilization or decrease GPU memory used by other processes.",
     {"free_memory_gib": 28.49, "gpu_total_gib": 124.0, "gpu_memory_utilization": 0.95,
      "requested_memory_gib": 117.8}),
    ("INFO [gpu_worker.py:789] Free memory on device (23.15/23.56 GiB) on startup. Desired GPU "
     "memory utilization is (0.92, 21.67 GiB). Actual usage is 15.25 GiB for consumed memory "
     "(weights + non-torch), 1.66 GiB for peak activation, and 0.14 GiB for CUDAGraph memory. "
     "Replace gpu_memory_utilization config with `--kv-cache-memory=4805904446` (4.48 GiB) to fit "
     "into requested memory, or `--kv-cache-memory=6390038016` (5.95 GiB) to fully utilize gpu "
     "memory. Current kv cache memory in use is 4.76 GiB.",
     {"free_memory_gib": 23.15, "gpu_total_gib": 23.56, "gpu_memory_utilization": 0.92,
      "requested_memory_gib": 21.67, "budget_gib": 21.67, "activation_peak_gib": 1.66,
      "cuda_graph_gib": 0.14, "kv_cache_available_gib": 4.76, "weights_gib": None,
      "kv_cache_memory_bytes": None}),
    ("DEBUG Free memory on device (70.0/79.19 GiB) on startup. Desired GPU memory utilization is "
     "(0.9, 71.27 GiB). Actual usage is 14.99 GiB for weight, 1.2 GiB for peak activation, 0.3 GiB "
     "for non-torch memory, and 0.5 GiB for CUDAGraph memory.",
     {"weights_gib": 14.99, "activation_peak_gib": 1.2, "non_torch_gib": 0.3,
      "cuda_graph_gib": 0.5}),
    # KV cache too small: V1 wordings
    ("ValueError: To serve at least one request with the models's max seq len (1048576), (24.00 "
     "GiB KV cache is needed, which is larger than the available KV cache memory (9.97 GiB). Try "
     "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
     "engine.",
     {"max_model_len": 1048576, "kv_cache_needed_gib": 24.0, "kv_cache_available_gib": 9.97,
      "estimated_max_model_len": None, "engine_generation": "V1"}),
    ("ValueError: To serve at least one request with the models's max seq len (221000), (10.12 GiB "
     "KV cache is needed, which is larger than the available KV cache memory (5.59 GiB). Based on "
     "the available memory, the estimated maximum model length is 122080. Try increasing "
     "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
     {"max_model_len": 221000, "kv_cache_needed_gib": 10.12, "kv_cache_available_gib": 5.59,
      "estimated_max_model_len": 122080}),
    ("ValueError: To serve at least one request with the model's max seq len (1048576), (44.25 GiB "
     "KV cache is needed, which is larger than the available KV cache memory (8.42 GiB). Based on "
     "the available memory, the estimated maximum model length is 199552. Try increasing "
     "gpu_memory_utilization (which also controls CPU memory on the CPU backend) or decreasing "
     "max_model_len when initializing the engine. See https://docs.vllm.ai/en/latest/"
     "configuration/conserving_memory/ for more details.",
     {"max_model_len": 1048576, "kv_cache_needed_gib": 44.25, "kv_cache_available_gib": 8.42,
      "estimated_max_model_len": 199552}),
    ("ValueError: To serve at least one request with the model's max seq len (131072), (24.0 GiB "
     "KV cache is needed, which is larger than the available KV cache memory (22.5 GiB). Based on "
     "the available memory, the estimated maximum model length is 122880.",
     {"kv_cache_needed_gib": 24.0, "kv_cache_available_gib": 22.5}),
    # V0 wording
    ("ValueError: The model's max seq len (29000) is larger than the maximum number of tokens "
     "that can be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or "
     "decreasing `max_model_len` when initializing the engine.",
     {"max_model_len": 29000, "kv_cache_tokens": 23648, "engine_generation": "V0"}),
    ("INFO Auto-fit max_model_len: reduced from 262144 to 77824 to fit in available GPU memory "
     "(9.97 GiB available for KV cache)",
     {"max_model_len": 77824, "kv_cache_available_gib": 9.97}),
    ("INFO [config.py:1] Using max model len 32768", {"max_model_len": 32768}),
    # runtime pressure
    ("WARNING scheduler.py:1754] Sequence group 221 is preempted by PreemptionMode.RECOMPUTE mode "
     "because there is not enough KV cache space. total_num_cumulative_preemption=101\n"
     "WARNING scheduler.py:1754] Sequence group 9 is preempted by PreemptionMode.SWAP mode because "
     "there is not enough KV cache space. total_num_cumulative_preemption=51",
     {"preemptions": 101, "engine_generation": "V0"}),
    ("INFO metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 7220.5 "
     "tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 98 reqs, GPU KV cache usage: 73.8%, "
     "CPU KV cache usage: 0.0%.\n"
     "INFO metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Running: 3 reqs, Swapped: 0 reqs, "
     "Pending: 97 reqs, GPU KV cache usage: 99.2%, CPU KV cache usage: 0.0%.\n"
     "INFO metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, "
     "Pending: 5 reqs, GPU KV cache usage: 12.0%, CPU KV cache usage: 0.0%.",
     {"running_requests": 1, "waiting_requests": 5, "gpu_kv_cache_usage_pct": 99.2}),
    ("(APIServer pid=1) INFO [loggers.py:123] Engine 000: Avg prompt throughput: 12.1 tokens/s, "
     "Avg generation throughput: 30.0 tokens/s, Running: 7 reqs, Waiting: 3 reqs, GPU KV cache "
     "usage: 95.5%, Prefix cache hit rate: 0.0%",
     {"running_requests": 7, "waiting_requests": 3, "gpu_kv_cache_usage_pct": 95.5,
      "engine_generation": "V1"}),
    # identity
    ("INFO 04-05 api_server.py:1] vLLM API server version 0.8.3",
     {"engine": "vllm", "engine_version": "0.8.3"}),
    ("INFO 08-01 [core.py:1] Initializing a V1 LLM engine (v0.10.1) with config: model='x'",
     {"engine_version": "0.10.1", "engine_generation": "V1"}),
    ("INFO llm_engine.py:1] Initializing an LLM engine (v0.6.3.post1) with config: model='x'",
     {"engine_version": "0.6.3.post1", "engine_generation": "V0"}),
    ("vllm-0.15.2rc1.dev93+g11a4c9d30.cu128-cp312-cp312-linux_x86_64.whl",
     {"engine_version": "0.15.2rc1.dev93", "engine_generation": "V1"}),
    ("- vLLM version: 0.7.3", {"engine_version": "0.7.3", "engine_generation": None}),
    ("vLLM Version: 0.5.4", {"engine_version": "0.5.4", "engine_generation": "V0"}),
    ("INFO [gpu_model_runner.py:1] Starting to load model Qwen/Qwen3-8B...",
     {"model": "Qwen/Qwen3-8B"}),
    ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your "
     "Tesla T4 GPU has compute capability 7.5. You can use float16 instead.",
     {"gpu_name": "Tesla T4", "compute_capability": "7.5"}),
    ("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum "
     "capability: 90. Current capability: 86.",
     {"quantization": "fp8", "compute_capability": "8.6"}),
    # generation overrides
    ("--preemption-mode is not supported by the V1 Engine. Falling back to V0.\n"
     "INFO [gpu_model_runner.py:1] Model loading took 1 GiB and 1 seconds",
     {"engine_generation": "V0"}),
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[c[0][:60] for c in CASES])
def test_line_gives_its_figures(text: str, expected: dict[str, Any]) -> None:
    facts = extract_facts(text)
    for name, value in expected.items():
        got = getattr(facts, name)
        if isinstance(value, float):
            assert got == pytest.approx(value), name
        else:
            assert got == value, name


@pytest.mark.parametrize(("device", "tokens"), [("cuda", 1600), ("xpu", None), ("hpu", None)])
def test_block_size_default_only_on_cuda(device: str, tokens: int | None) -> None:
    text = (f"Initializing an LLM engine (v0.6.3) with config: model='m', device_config={device}, "
            "seed=0\n# GPU blocks: 100, # CPU blocks: 5\n")
    assert extract_facts(text).kv_cache_tokens == tokens


def test_later_start_attempt_wins() -> None:
    facts = extract_facts("Available KV cache memory: 3.00 GiB\n...\nAvailable KV cache memory: "
                          "1.50 GiB\n")
    assert facts.kv_cache_available_gib == 1.5


def test_hints_and_suggestions_are_not_settings() -> None:
    text = ("CUDA graph memory profiling is enabled (default since v0.21.0). The current "
            "--gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=0.8800 "
            "without CUDA graph memory profiling. To maintain the same effective KV cache size as "
            "before, increase --gpu-memory-utilization to 0.9200.\n"
            "To run the model in eager mode, set 'enforce_eager=True' or use '--enforce-eager' in "
            "the CLI.\n"
            "Try increasing `gpu_memory_utilization` or decreasing `max_model_len`.")
    facts = extract_facts(text)
    assert facts.gpu_memory_utilization is None
    assert facts.enforce_eager is None


def test_nothing_shown_is_none() -> None:
    facts = extract_facts("RuntimeError: NCCL error: unhandled system error\n")
    assert facts.known() == {}
