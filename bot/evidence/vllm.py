"""vLLM's own log lines: version, engine generation, model, and every memory figure it prints.

Formats follow the lines vLLM itself prints (gpu_worker.py, model_runner.py, kv_cache_utils.py
and their V0 counterparts), across V0 and V1 and their wording changes ("models's"/"model's",
"%.2f" vs format_gib's "22.5", comma-grouped token counts). Figures are stored as printed;
nothing is recomputed here.
"""

from __future__ import annotations

from typing import ClassVar

from bot.evidence.base import FactSink, Fold, Line
from bot.evidence.rules import Rules, rule
from bot.evidence.units import NUM, num
from bot.lazyre import lazy

_GIB = r" ?(?:GiB|GB)"

_RULES = Rules(
    # weights
    rule("model weights took", rf"Loading model weights took {num('weights_gib')}{_GIB}"),
    rule("Model loading took", rf"Model loading took {num('weights_gib')}{_GIB}"),
    # V0 ~0.6.4 one-line summary (peak_torch_memory includes the weights: not an activation peak)
    *(rule("Memory profiling results", rf"\b{key}={num(fact)}(?:{_GIB})?")
      for key, fact in (("total_gpu_memory", "gpu_total_gib"),
                        ("initial_memory_usage", "profile_start_used_gib"),
                        ("non_torch_memory", "non_torch_gib"),
                        ("kv_cache_size", "kv_cache_available_gib"),
                        ("gpu_memory_utilization", "gpu_memory_utilization"))),
    # V0 ~0.7-0.10 three-line profile
    rule("the current vLLM instance can use",
         rf"total_gpu_memory \({num('gpu_total_gib')}{_GIB}\) x gpu_memory_utilization "
         rf"\({num('gpu_memory_utilization')}\) = {num('budget_gib')}{_GIB}"),
    rule("model weights take", rf"model weights take {num('weights_gib')}{_GIB}"),
    rule("non_torch_memory takes", rf"non_torch_memory takes {num('non_torch_gib')}{_GIB}"),
    rule("activation peak memory takes",
         rf"activation peak memory takes {num('activation_peak_gib')}{_GIB}"),
    rule("reserved for KV Cache is",
         rf"reserved for KV Cache is {num('kv_cache_available_gib')}{_GIB}"),
    # V1 DEBUG profile
    rule("torch peak memory increase",
         rf"torch peak memory increase: {num('activation_peak_gib')}{_GIB}"),
    rule("non-torch forward increase memory",
         rf"non-torch forward increase memory: {num('non_torch_gib')}{_GIB}"),
    rule("Total non KV cache memory", rf"weights memory: {num('weights_gib')}{_GIB}"),
    # V1 budget
    rule("Available KV cache memory",
         rf"Available KV cache memory: {num('kv_cache_available_gib')}{_GIB}"),
    rule("as specified by kv_cache_memory_bytes",
         rf"reserved {num('kv_cache_available_gib')}{_GIB} memory for KV Cache as specified"),
    # blocks, tokens, concurrency
    rule(" blocks: ",
         rf"# (?!CPU)[A-Za-z]{{1,8}} blocks: {num('gpu_blocks')}"
         rf"(?:, # CPU blocks: {num('cpu_blocks')})?"),
    rule("KV cache size:", rf"GPU KV cache size: {num('kv_cache_tokens')} tokens"),
    rule("Maximum concurrency for",
         rf"Maximum concurrency for {num('concurrency_tokens')} tokens per request: "
         rf"{num('max_concurrency')}x"),
    # CUDA graphs
    rule("Graph capturing finished",
         rf"Graph capturing finished in {NUM} secs?, took {num('cuda_graph_gib')}{_GIB}"),
    rule("Estimated CUDA graph memory",
         rf"Estimated CUDA graph memory: {num('cuda_graph_gib')}{_GIB}"),
    rule("CUDA graph pool memory",
         rf"CUDA graph pool memory: {num('cuda_graph_gib')}{_GIB} \(actual\)"),
    # start-up check (error) and the 2026 INFO breakdown
    # (another build: "Available memory on device cuda:0 (28.49/124.0 GiB) is below required
    # GPU memory utilization (0.95, 117.8 GiB)")
    rule("memory on device",
         rf"(?:Free|Available) memory on device(?: [\w:]{{1,16}})? \({num('free_memory_gib')}/"
         rf"{num('gpu_total_gib')}{_GIB}\) (?:on startup|is below required)"),
    # the start-up check as later builds word it: "Free memory on cuda:0 (38.74/121.63 GiB)
    # < desired utilization (0.35, 42.57 GiB)"
    rule("desired utilization",
         rf"Free memory(?: on [\w:]{{1,16}})? \({num('free_memory_gib')}/"
         rf"{num('gpu_total_gib')}{_GIB}\) < desired utilization"),
    rule("desired utilization",
         rf"< desired utilization \({num('gpu_memory_utilization')}, "
         rf"{num('requested_memory_gib')}{_GIB}\)"),
    rule("below required GPU memory utilization",
         rf"below required GPU memory utilization \({num('gpu_memory_utilization')}, "
         rf"{num('requested_memory_gib')}{_GIB}\)"),
    rule("esired GPU memory utilization",
         rf"[Dd]esired GPU memory utilization (?:is )?\({num('gpu_memory_utilization')}, "
         rf"{num('requested_memory_gib')}{_GIB}\)"),
    rule("esired GPU memory utilization",
         rf"[Dd]esired GPU memory utilization (?:is )?\({NUM}, {num('budget_gib')}{_GIB}\)",
         default=True),
    rule("Actual usage is", rf"{num('weights_gib')}{_GIB} for weight,"),
    rule("Actual usage is", rf"{num('activation_peak_gib')}{_GIB} for peak activation"),
    rule("Actual usage is", rf"{num('non_torch_gib')}{_GIB} for non-torch memory"),
    rule("Actual usage is", rf"{num('cuda_graph_gib')}{_GIB} for CUDAGraph memory"),
    rule("kv cache memory in use is",
         rf"kv cache memory in use is {num('kv_cache_available_gib')}{_GIB}", default=True),
    # KV cache too small for one request: V1 (all wordings) and V0. Each figure has its own
    # rule, so a message re-flowed over lines still gives all three.
    rule("To serve at least one request", rf"max seq len \({num('max_model_len')}\)"),
    rule("KV cache is needed", rf"{num('kv_cache_needed_gib')}{_GIB} KV cache is needed"),
    rule("than the available KV cache memory",
         rf"than the available KV cache memory \({num('kv_cache_available_gib')}{_GIB}\)"),
    rule("estimated maximum model length is",
         rf"estimated maximum model length is {num('estimated_max_model_len')}"),
    rule("stored in KV cache",
         rf"max seq len \({num('max_model_len')}\) is larger than the maximum number of tokens "
         rf"that can be stored in KV cache \({num('kv_cache_tokens')}\)"),
    rule("Auto-fit max_model_len",
         rf"reduced from {NUM} to {num('max_model_len')} to fit in available GPU memory "
         rf"\({num('kv_cache_available_gib')}{_GIB} available"),
    rule("Auto-fit max_model_len",
         rf"full model context length {num('max_model_len')} fits"),
    rule("Using max model len", rf"Using max model len {num('max_model_len')}"),
    # runtime pressure
    rule("total_num_cumulative_preemption",
         rf"total_num_cumulative_preemption={num('preemptions')}", peak=True),
    rule("GPU KV cache usage", rf"GPU KV cache usage: {num('gpu_kv_cache_usage_pct')} ?%",
         peak=True),
    rule("GPU KV cache usage", rf"Running: {num('running_requests')} reqs"),
    rule("GPU KV cache usage", rf"(?:Waiting|Pending): {num('waiting_requests')} reqs"),
    # what is loaded, and on what
    rule("Starting to load model",
         r"Starting to load model (?P<model>[^\s.][^\s]{0,200}?)(?:\.\.\.|\s|$)"),
    rule("GPU has compute capability",
         r"Your (?P<gpu_name>[\w .-]{1,60}?) GPU has compute capability "
         r"(?P<compute_capability>\d{1,2}\.\d{1,2})"),
    rule("must be divisible by tensor parallel size",
         rf"Total number of attention heads \({num('num_attention_heads')}\) must be divisible"),
    rule("The quantization method",
         r"The quantization method (?P<quantization>[\w-]{1,32}) is not supported"),
)

# Lines that only one generation prints. EngineCore is checked but not an anchor: V1 prefixes
# every line with it, and offering every line would defeat the scanner.
_V1_MARKERS = ("V1 LLM engine", "vllm/v1/", "EngineCore", "Engine 000:", "GPU KV cache size",
               "Available KV cache memory", "To serve at least one request", "kv_cache_utils",
               "gpu_model_runner", "gpu_worker", "Waiting:", "Free memory on device",
               "Engine core initialization failed", "VLLM_USE_V1=1")
_V0_MARKERS = ("Initializing an LLM engine", "/vllm/worker/", "[worker.py", "executor_base",
               "Memory profiling results", "the current vLLM instance can use",
               "stored in KV cache", "total_num_cumulative_preemption", "Pending:",
               "# CPU blocks", "Loading model weights took")
_FORCE_V0 = ("Falling back to V0", "VLLM_USE_V1=0")

_VERSION = lazy(
    r"(?:vLLM API server version |LLM engine \(v|vLLM [Vv]ersion:? {0,40}|vLLM: |vllm==|vllm-"
    r"|vllm-openai:v)(?P<v>\d{1,3}\.\d{1,3}[0-9a-z.]{0,30})")
_VERSION_KEYS = ("vLLM API server version", "LLM engine (v", "vLLM version", "vLLM Version",
                 "vLLM: ", "vllm==", "vllm-")
_MAJOR_MINOR = lazy(r"(\d{1,3})\.(\d{1,3})")
_CAPABILITY = lazy(r"Current capability: (\d)(\d{1,2})\b")
_STRONG_ENGINE_KEYS = ("vllm serve", "vllm.entrypoints", "LLM engine (v", "vllm/vllm-openai")
_ENGINE_KEYS = ("vLLM", "vllm serve", "vllm.entrypoints", "VLLM::", "/vllm/", "vllm/vllm-openai")


# Rules, and substring tests whose effect is the same on every line holding them.
_FOLD = _RULES.fold(
    keys=(*_STRONG_ENGINE_KEYS, *_ENGINE_KEYS, *_V1_MARKERS, *_V0_MARKERS, *_FORCE_V0),
    gated=((_VERSION_KEYS, _VERSION), (("Current capability",), _CAPABILITY)))


class VllmExtractor:
    name: ClassVar[str] = "vllm"
    # One anchor per line format (the rules' keywords are checked within the offered line): the
    # scanner pays one pass over the input per anchor.
    anchors: ClassVar[tuple[str, ...]] = (
        "model weights t", "Model loading took", "Memory profiling", "the current vLLM instance",
        "KV cache memory", "as specified by kv_cache_memory_bytes", " blocks: ", "KV cache size:",
        "Maximum concurrency for", "Graph capturing finished", "CUDA graph",
        "memory on device", "desired utilization", "To serve at least one request",
        "stored in KV cache",
        "estimated maximum model length is", "KV cache is needed",
        "than the available KV cache memory",
        "Auto-fit max_model_len", "Using max model len", "total_num_cumulative_preemption",
        "GPU KV cache usage",
        "Starting to load model", "GPU has compute capability", "The quantization method",
        "must be divisible by tensor parallel size",
        "LLM engine (v", "Engine core initialization failed", "VLLM_USE_V1", "Falling back to V0",
        "vLLM API server version", "vLLM version", "vLLM Version", "vLLM: ", "vllm==", "vllm-",
        "vllm serve", "vllm.entrypoints", "VLLM::", "/vllm/")
    follow: ClassVar[int] = 0

    def __init__(self) -> None:
        self._v1 = False
        self._v0 = False
        self._force_v0 = False

    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text
        if _RULES.apply(line, sink):
            sink.set("engine", "vllm", line.no)
        if any(k in text for k in _VERSION_KEYS):
            m = _VERSION.search(text)
            if m:
                sink.set("engine_version", m.group("v").rstrip("."), line.no)
                sink.set("engine", "vllm", line.no)
        if "Current capability" in text:
            m = _CAPABILITY.search(text)
            if m:
                sink.set("compute_capability", f"{m.group(1)}.{m.group(2)}", line.no)
        if any(k in text for k in _STRONG_ENGINE_KEYS):
            sink.set("engine", "vllm", line.no)
        elif sink.get("engine") is None and any(k in text for k in _ENGINE_KEYS):
            sink.set_default("engine", "vllm", line.no)
        self._v1 = self._v1 or any(k in text for k in _V1_MARKERS)
        self._v0 = self._v0 or any(k in text for k in _V0_MARKERS)
        self._force_v0 = self._force_v0 or any(k in text for k in _FORCE_V0)

    def fold(self) -> Fold:
        return _FOLD

    def finish(self, sink: FactSink) -> None:
        if self._force_v0:
            sink.set("engine_generation", "V0")
        elif self._v1:
            sink.set("engine_generation", "V1")
        elif self._v0:
            sink.set("engine_generation", "V0")
        elif sink.get("engine") == "vllm":
            # Only V0 existed before 0.7; V0 was removed in 0.11. In between, the version
            # alone does not tell.
            generation = _generation_of(sink.get("engine_version"))
            if generation:
                sink.set_default("engine_generation", generation)


def _generation_of(version: str | None) -> str | None:
    m = _MAJOR_MINOR.match(version or "")
    if m is None:
        return None
    major, minor = int(m.group(1)), int(m.group(2))
    if (major, minor) < (0, 7):
        return "V0"
    if (major, minor) >= (0, 11):
        return "V1"
    return None
