"""The core's vocabulary: what goes into a diagnosis and what comes out.

Every adapter (CLI, Slack, collector, store) speaks these types and nothing else, so a field
added here is visible everywhere at once. The JSON contract of `inferbot diagnose --json` is
`to_json(diagnosis)`; fields may be added, never renamed.

These are stdlib dataclasses, not pydantic models, on purpose: `inferbot diagnose` must start
in about the time it takes to import pydantic, and defining pydantic classes costs more than
that. Pydantic still guards every boundary: `parse(cls, data)` validates untrusted data (JSON
read back from the store, Slack payloads, KB files) against these same classes, with unknown
keys rejected (`__pydantic_config__`).

A fact that is not known is None, never a guess: downstream arithmetic relies on that to tell
"the log says 0" from "the log says nothing".
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import field
from typing import Any, ClassVar, Literal, TypeVar

from bot.fingerprint import Fingerprint
from bot.structs import struct

GIB = 1 << 30
MIB = 1 << 20

Engine = Literal["vllm", "sglang", "tgi", "lmdeploy"]
Source = Literal["cli", "slack", "collector", "api"]
T = TypeVar("T")

_FORBID: dict[str, Any] = {"extra": "forbid"}


def parse(cls: type[T], data: Any) -> T:
    """Validate untrusted `data` into `cls` (raises pydantic.ValidationError)."""
    from pydantic import TypeAdapter  # imported only where untrusted data enters

    return TypeAdapter(cls).validate_python(data)


def to_data(obj: Any) -> dict[str, Any]:
    """Plain dict/list/scalar form of a schema object, ready for JSON."""
    data = _plain(obj)
    assert isinstance(data, dict)
    return data


def _plain(value: Any) -> Any:
    """`dataclasses.asdict`, except that a value with a `json_value()` (a Fingerprint) is
    shown as what that returns."""
    json_value = getattr(value, "json_value", None)
    if callable(json_value):
        return _plain(json_value())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def to_json(obj: Any, indent: int | None = None) -> str:
    return json.dumps(to_data(obj), indent=indent, ensure_ascii=False)


def field_names(cls: type[Any]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _unit(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1, got {value}")


@struct(slots=True, kw_only=True)
class Strict:
    """Base for schema types: unknown keys are errors when validated with `parse`."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _FORBID


@struct(slots=True, kw_only=True)
class GpuInfo(Strict):
    """One GPU as nvidia-smi or NVML reports it. MiB as the tools print them."""

    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    total_mib: float | None = None
    used_mib: float | None = None
    free_mib: float | None = None
    utilization_pct: float | None = None
    compute_capability: str | None = None
    mig_mode: str | None = None
    # A MIG slice is reported as its own device; `parent_index` is the physical GPU.
    mig_instance: str | None = None
    parent_index: int | None = None


@struct(slots=True, kw_only=True)
class GpuProcess(Strict):
    """A process holding GPU memory. `is_server` marks the inference server under diagnosis."""

    gpu_index: int | None = None
    gpu_uuid: str | None = None
    pid: int | None = None
    name: str | None = None
    used_mib: float | None = None
    container: str | None = None
    is_server: bool | None = None
    # Where it was read: "nvidia-smi" (a pasted or collected table), "torch" (the "Process N
    # has X memory in use" lines of a CUDA OOM message), "nvml".
    source: str | None = None


@struct(slots=True, kw_only=True)
class Facts(Strict):
    """Numbers and settings read from the evidence. GiB are 2**30 bytes, as vLLM prints them."""

    # what is running
    engine: Engine | None = None
    engine_version: str | None = None
    engine_generation: Literal["V0", "V1"] | None = None
    model: str | None = None
    # a model the person names in words ("serve `Qwen3-32B-FP8`"): what the sizing reads when
    # the command's model is a local path the catalog cannot place
    model_named: str | None = None
    dtype: str | None = None
    quantization: str | None = None
    num_attention_heads: int | None = None  # as an error printed it (the model's config wins)
    # server flags
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool | None = None
    enforce_eager: bool | None = None
    cpu_offload_gb: float | None = None
    kv_cache_memory_bytes: int | None = None
    swap_space_gib: float | None = None
    mem_fraction_static: float | None = None  # SGLang's gpu_memory_utilization
    # lmdeploy's KV cache share: of the memory free after the weights (TurboMind since 0.2.1)
    cache_max_entry_count: float | None = None
    max_total_tokens: int | None = None  # SGLang / TGI token pool
    max_batch_prefill_tokens: int | None = None  # TGI
    max_input_length: int | None = None  # TGI
    # the context length the person says the application needs ("our app needs 32k
    # tokens"): a length fix sets this rather than its own choice when it fits
    needed_max_model_len: int | None = None
    # the device
    gpu_name: str | None = None
    gpu_count: int | None = None
    gpu_total_gib: float | None = None
    gpu_used_gib: float | None = None
    compute_capability: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    free_memory_gib: float | None = None
    requested_memory_gib: float | None = None
    foreign_processes_gib: float | None = None
    # the memory profile
    weights_gib: float | None = None
    activation_peak_gib: float | None = None
    non_torch_gib: float | None = None
    cuda_graph_gib: float | None = None
    budget_gib: float | None = None  # total x utilization, as the log prints it
    kv_cache_available_gib: float | None = None
    kv_cache_needed_gib: float | None = None
    estimated_max_model_len: int | None = None
    gpu_blocks: int | None = None
    cpu_blocks: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_tokens: int | None = None  # the length in "Maximum concurrency for N tokens"
    # OOM details (PyTorch allocator message)
    oom_tried_to_allocate_gib: float | None = None
    oom_gpu_index: int | None = None
    oom_free_gib: float | None = None
    oom_process_in_use_gib: float | None = None  # the failing process ("this process has")
    oom_allocated_gib: float | None = None  # "Of the allocated memory X is allocated by PyTorch"
    oom_reserved_gib: float | None = None  # reserved by PyTorch (old: "reserved in total")
    # memory the GPU held that is neither free nor this process's PyTorch memory (total -
    # free - reserved): other processes plus this process's CUDA context and libraries
    oom_outside_pytorch_gib: float | None = None
    # the failing process's own memory that its PyTorch allocator does not hold (in use -
    # reserved): a CUDA context, libraries, or an engine pool allocated outside PyTorch
    oom_process_outside_pytorch_gib: float | None = None
    # what else is on the GPU
    used_before_start_gib: float | None = None  # in use before this server allocated anything
    profile_start_used_gib: float | None = None  # V0 "initial_memory_usage": weights included
    engines_on_gpu: int | None = None  # inference engines the paste starts (servers, LLM())
    trainer_on_gpu: bool | None = None  # a trainer shares the GPU (GRPO/RLHF colocation)
    # the paste is from a training run past its start (PPO/GRPO/RLVR scripts, a trainer's
    # steps), engine or not
    training_run: bool | None = None
    # where the server was when it failed (the top problem's phase, bot.kb.phase)
    phase: str | None = None
    # runtime pressure
    gpu_kv_cache_usage_pct: float | None = None
    preemptions: int | None = None
    running_requests: int | None = None
    waiting_requests: int | None = None
    # pasted nvidia-smi / collected GPU state
    gpus: list[GpuInfo] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)

    def known(self) -> dict[str, Any]:
        """The facts that are set, for display and for filling fix templates."""
        return {k: v for k, v in to_data(self).items() if v is not None and v != []}


@struct(slots=True, kw_only=True)
class InputStats(Strict):
    """How much was read, so an answer can say it looked at everything (or what it skipped)."""

    bytes: int = 0
    lines: int = 0
    truncated: bool = False
    binary: bool = False
    note: str | None = None


@struct(slots=True, kw_only=True)
class Evidence(Strict):
    """What an adapter hands the core: text (a paste, a log, a file) plus collected state.

    `text` is redacted by the core before anything else sees it. `model_config_json` is a
    model's config.json when the collector fetched it or the user attached it.
    """

    text: str = ""
    source: Source = "cli"
    host: str | None = None
    channel: str | None = None
    thread: str | None = None
    user: str | None = None
    collected: Facts | None = None  # facts read from a host, not from text; they win on conflict
    model_config_json: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


@struct(slots=True, kw_only=True)
class CommandRun(Strict):
    """One command the collector ran on a host, as the audit trail keeps it (exit_code None:
    killed or timed out). The commands of one check share `run_id`."""

    host: str
    command_id: str
    duration_s: float
    exit_code: int | None
    bytes_out: int
    error: str | None = None
    run_id: str | None = None
    who: str | None = None


@struct(slots=True, kw_only=True)
class ProblemMatch(Strict):
    """A problem the evidence names: how sure, the lines that show it, the phase at them."""
    id: str
    title: str
    confidence: float
    evidence: list[str] = field(default_factory=list)
    line_numbers: list[int] = field(default_factory=list)
    summary: str = ""
    signature_ids: list[str] = field(default_factory=list)
    # The server's phase at the deciding line (knowledge/phases.yaml: loading, profiling,
    # cuda-graph, warmup, startup, serving), from the traceback frames or the log's milestones.
    phase: str | None = None
    from_prose: bool = False  # only a person's words show it, no log line: weaker evidence

    def __post_init__(self) -> None:
        _unit("confidence", self.confidence)


@struct(slots=True, kw_only=True)
class CauseMatch(Strict):
    """A possible root cause of the top problem, with the fact or line that supports it."""
    id: str
    title: str
    confidence: float
    why: str = ""
    explanation: str = ""
    supported: bool = False  # the evidence backs it; False: possible, not decided

    def __post_init__(self) -> None:
        _unit("confidence", self.confidence)


@struct(slots=True, kw_only=True)
class CauseRef(Strict):
    """A cause named without its evidence: not ruled out, not shown among the ranked ones."""

    id: str
    title: str


@struct(slots=True, kw_only=True)
class Fix(Strict):
    """A command the user can paste, with the computed value and what it will change."""

    id: str
    title: str
    cause_id: str | None = None
    command: str
    flags: dict[str, str | int | float | bool | None] = field(default_factory=dict)
    predicted: str = ""
    disruption: int = 5  # 0 = a flag on restart ... 9 = new hardware; the ordering key
    computed: bool = True  # False when the value could not be computed from the evidence
    # What the fix changes on the server's command line ("--max-model-len 131072 -> 32768";
    # "--gpu-memory-utilization 0.65" when that line is not known); "" for other commands.
    change: str = ""
    # Words of `command` a person must fill in (MODEL, AWQ_CHECKPOINT_OF_THE_MODEL): such a
    # fix is shown as an instruction, never first and never behind a button.
    placeholders: list[str] = field(default_factory=list)
    instruction: str = ""  # what to do by hand when `placeholders` name more than the model
    # the fix as the container's args list, when the server ran from one (a Kubernetes manifest)
    args: list[str] | None = None
    # the fix as the environment the server ran with, when the paste shows it configured that
    # way, in that environment's own lines (`-e NAME=value`, a manifest's name/value pair)
    env: list[str] | None = None


@struct(slots=True, kw_only=True)
class WithheldFix(Strict):
    """A fix the KB lists that cannot work here, and why (shown so nobody tries it anyway)."""

    id: str
    title: str
    reason: str


@struct(slots=True, kw_only=True)
class SizingFigures(Strict):
    """The arithmetic's working figures for one rank, beside Sizing's headline numbers: the
    terms of the budget as worked out, and what each knob would change (the what-ifs, in JSON
    only when they were computed). Fix templates and conditions read them by name."""

    gpu_total_gib: float | None = None  # the GPU's memory as the arithmetic used it
    gpu_memory_utilization: float | None = None  # as set, else the engine's default
    activation_gib: float | None = None  # the profile run's activation peak
    non_torch_gib: float | None = None  # memory outside PyTorch's allocator (NCCL, CUDA context)
    cuda_graph_gib: float | None = None  # memory the captured CUDA graphs hold
    non_kv_gib: float | None = None  # the budget less the KV cache: weights, activation, other
    foreign_processes_gib: float | None = None  # other processes on the GPU
    free_memory_gib: float | None = None  # free at start-up
    free_check_fails: bool | None = None  # vLLM's start-up check (free < total x utilization)
    num_gpu_blocks: int | None = None  # KV blocks per worker (logged, else computed)
    kv_cache_tokens: int | None = None  # tokens the KV cache holds (logged, else computed)
    target_max_model_len: int | None = None  # the length asked for (flag, else the model's own)
    utilization_needed: float | None = None  # at which one target-length request fits
    tensor_parallel_size: int | None = None  # as the arithmetic used it (1 when not set)
    pipeline_parallel_size: int | None = None  # as the arithmetic used it (1 when not set)
    pp_layers: list[int] | None = None  # layers per pipeline stage
    kv_heads_per_rank: int | None = None  # KV heads each tensor-parallel rank holds
    head_size: int | None = None  # the attention head dimension
    weights_exceed_gpu: bool | None = None  # the weights alone are larger than one GPU
    weights_exceed_safe_budget: bool | None = None  # more than the GPU at the safe 0.95
    headroom_gib: float | None = None  # outside the budget, other processes and CUDA graphs
    model_id: str | None = None  # the catalog's entry for the model
    model_quantization: str | None = None  # the quantization the model's name implies
    gpu_catalog_id: str | None = None  # the catalog's entry for the GPU
    # What each knob would change.
    fp8_max_model_len: int | None = None  # largest --max-model-len with --kv-cache-dtype fp8
    quantized_weights_gib: float | None = None  # weights after 4-bit quantization (AWQ/GPTQ)
    quantized_max_model_len: int | None = None  # largest --max-model-len at 4-bit weights
    fp8_weights_gib: float | None = None  # weights after FP8 weight quantization
    suggested_tensor_parallel_size: int | None = None  # smallest larger TP size that fits
    tp_max_model_len: int | None = None  # largest --max-model-len at that TP size
    kv_cache_memory_suggested_bytes: int | None = None  # a --kv-cache-memory that fits
    cpu_offload_gb_suggested: int | None = None  # --cpu-offload-gb that frees enough
    suggested_max_num_batched_tokens: int | None = None  # a smaller profile run's token count
    activation_saving_gib: float | None = None  # activation memory that frees (estimate)
    suggested_max_num_seqs: int | None = None  # a smaller --max-num-seqs for warm-up and graphs

    WHAT_IFS: ClassVar[frozenset[str]] = frozenset({
        "fp8_max_model_len", "quantized_weights_gib", "quantized_max_model_len",
        "fp8_weights_gib", "suggested_tensor_parallel_size", "tp_max_model_len",
        "kv_cache_memory_suggested_bytes", "cpu_offload_gb_suggested",
        "suggested_max_num_batched_tokens", "activation_saving_gib", "suggested_max_num_seqs"})

    def json_value(self) -> dict[str, Any]:
        """The figures; a what-if that was not computed is left out, not null."""
        return {f.name: value for f in dataclasses.fields(self)
                if (value := getattr(self, f.name)) is not None or f.name not in self.WHAT_IFS}


@struct(slots=True, kw_only=True)
class Sizing(Strict):
    """The memory arithmetic. Renderers show what is present; `extra` holds the working
    figures and the what-ifs (SizingFigures)."""

    is_estimate: bool = False
    basis: str = ""  # "log", "host", "catalog": where the budget came from
    block_size: int | None = None
    kv_bytes_per_token: int | None = None
    kv_bytes_per_block: int | None = None
    budget_gib: float | None = None
    weights_gib: float | None = None
    kv_cache_available_gib: float | None = None
    kv_cache_needed_gib: float | None = None
    max_model_len_that_fits: int | None = None
    max_concurrency: float | None = None
    notes: list[str] = field(default_factory=list)
    extra: SizingFigures = field(default_factory=SizingFigures)


@struct(slots=True, kw_only=True)
class GuideStep(Strict):
    """One step of the KB's guide: a title, the command to run, why."""
    title: str
    command: str | None = None
    explain: str | None = None


@struct(slots=True, kw_only=True)
class Guide(Strict):
    """The KB's prose for the top problem: how to confirm, what to run, how to prevent it."""

    short_answer: str = ""
    confirm: list[str] = field(default_factory=list)
    diagnostics: list[GuideStep] = field(default_factory=list)
    prevention: list[str] = field(default_factory=list)
    architecture: str = ""
    faq: list[dict[str, str]] = field(default_factory=list)
    affects: str = ""  # which engines, versions and set-ups the problem concerns


@struct(slots=True, kw_only=True)
class Raised(Strict):
    """The Python exception a paste that matched no known problem ends with."""

    type: str  # JSONDecodeError
    line: str = ""  # the line that names it, redacted
    package: str | None = None  # the installed package whose frame raised it; "" your code


@struct(slots=True, kw_only=True)
class AnswerLine(Strict):
    """A line of the answer as the terminal prints it."""

    text: str
    kind: Literal["text", "command", "quote"] = "text"  # command: to copy; quote: a log line


@struct(slots=True, kw_only=True)
class AnswerSection(Strict):
    """One section of the answer, in reading order (bot.render.present)."""

    key: str  # headline, history, fix, why (the first screen), proof, numbers, causes, ...
    title: str = ""
    first: bool = False  # on the first screen; the rest is the details
    lines: list[AnswerLine] = field(default_factory=list)


@struct(slots=True, kw_only=True)
class Presented(Strict):
    """The answer as the terminal and Slack show it: the same sections, the same words."""

    title: str
    sections: list[AnswerSection] = field(default_factory=list)


@struct(slots=True, kw_only=True)
class Diagnosis(Strict):
    """The core's answer. `to_json(diagnosis)` is the JSON contract."""

    # The contract's version: raised when a field changes meaning (fields are only added).
    schema_version: int = 2
    kb_version: str
    kb_hash: str = ""
    fingerprint: Fingerprint
    incident_id: int | None = None
    host: str | None = None
    problems: list[ProblemMatch] = field(default_factory=list)
    causes: list[CauseMatch] = field(default_factory=list)
    more_causes: list[CauseRef] = field(default_factory=list)  # not ruled out, not shown
    facts: Facts = field(default_factory=Facts)
    sizing: Sizing | None = None
    fixes: list[Fix] = field(default_factory=list)
    withheld_fixes: list[WithheldFix] = field(default_factory=list)
    guide: Guide | None = None
    input: InputStats = field(default_factory=InputStats)
    excerpt: str = ""  # redacted, bounded: the lines that matter, for storage and display
    # the server's command line as the evidence shows it (redacted); fixes are built from it
    server_command: str | None = None
    # what a paste that matched nothing raised (null when a problem matched)
    exception: Raised | None = None
    # the answer as shown, with its history line (`--json` only; null where stored)
    presented: Presented | None = None
    # readings the facts set aside, each with why ("not a shortage: 66 GiB were free")
    notes: list[str] = field(default_factory=list)

    @property
    def matched(self) -> bool:
        return bool(self.problems)

    @property
    def top(self) -> ProblemMatch | None:
        return self.problems[0] if self.problems else None
