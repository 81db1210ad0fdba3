"""The core's vocabulary: what goes into a diagnosis and what comes out.

Every adapter (CLI, Slack, collector, store) speaks these models and nothing else, so a field
added here is visible everywhere at once. The JSON contract of `inferbot diagnose --json` is
`Diagnosis.model_dump(mode="json")`; fields may be added, never renamed.

A fact that is not known is None, never a guess: downstream arithmetic relies on that to tell
"the log says 0" from "the log says nothing".
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

GIB = 1 << 30
MIB = 1 << 20

Engine = Literal["vllm", "sglang", "tgi"]
Source = Literal["cli", "slack", "collector", "api"]


class Strict(BaseModel):
    """Base for boundary models: unknown keys are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


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


class GpuProcess(Strict):
    """A process holding GPU memory. `is_server` marks the inference server under diagnosis."""

    gpu_index: int | None = None
    gpu_uuid: str | None = None
    pid: int | None = None
    name: str | None = None
    used_mib: float | None = None
    container: str | None = None
    is_server: bool | None = None


class Facts(Strict):
    """Numbers and settings read from the evidence. GiB are 2**30 bytes, as vLLM prints them."""

    # what is running
    engine: Engine | None = None
    engine_version: str | None = None
    engine_generation: Literal["V0", "V1"] | None = None
    model: str | None = None
    dtype: str | None = None
    quantization: str | None = None
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
    max_total_tokens: int | None = None  # SGLang / TGI token pool
    max_batch_prefill_tokens: int | None = None  # TGI
    max_input_length: int | None = None  # TGI
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
    oom_process_in_use_gib: float | None = None
    # runtime pressure
    gpu_kv_cache_usage_pct: float | None = None
    preemptions: int | None = None
    running_requests: int | None = None
    waiting_requests: int | None = None
    # pasted nvidia-smi / collected GPU state
    gpus: list[GpuInfo] = Field(default_factory=list)
    processes: list[GpuProcess] = Field(default_factory=list)

    def known(self) -> dict[str, Any]:
        """The facts that are set, for display and for filling fix templates."""
        return {
            k: v for k, v in self.model_dump().items() if v is not None and v != [] and v != {}
        }


class InputStats(Strict):
    """How much was read, so an answer can say it looked at everything (or what it skipped)."""

    bytes: int = 0
    lines: int = 0
    truncated: bool = False
    binary: bool = False
    note: str | None = None


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
    notes: list[str] = Field(default_factory=list)


class SignatureHit(Strict):
    """One KB signature that matched one line."""

    problem_id: str
    signature_id: str
    kind: Literal["error", "warning", "info"]
    line_no: int
    line: str  # redacted, bounded


class ProblemMatch(Strict):
    id: str
    title: str
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: list[str] = Field(default_factory=list)
    line_numbers: list[int] = Field(default_factory=list)
    summary: str = ""
    signature_ids: list[str] = Field(default_factory=list)


class CauseMatch(Strict):
    id: str
    title: str
    confidence: float = Field(ge=0.0, le=1.0)
    why: str = ""
    explanation: str = ""


class Fix(Strict):
    """A command the user can paste, with the computed value and what it will change."""

    id: str
    title: str
    cause_id: str | None = None
    command: str
    flags: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    predicted: str = ""
    disruption: int = Field(
        default=5, description="0 = config-only restart ... 9 = new hardware; ordering key"
    )
    computed: bool = True  # False when the value could not be computed from the evidence


class WithheldFix(Strict):
    """A fix the KB lists that cannot work here, and why (shown so nobody tries it anyway)."""

    id: str
    title: str
    reason: str


class Sizing(BaseModel):
    """The memory arithmetic. Open for new fields: renderers show what is present."""

    model_config = ConfigDict(extra="allow")

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
    notes: list[str] = Field(default_factory=list)


class GuideStep(Strict):
    title: str
    command: str | None = None
    explain: str | None = None


class Guide(Strict):
    """The KB's prose for the top problem: how to confirm, what to run, how to prevent it."""

    short_answer: str = ""
    confirm: list[str] = Field(default_factory=list)
    diagnostics: list[GuideStep] = Field(default_factory=list)
    prevention: list[str] = Field(default_factory=list)
    architecture: str = ""
    faq: list[dict[str, str]] = Field(default_factory=list)


class Diagnosis(BaseModel):
    """The core's answer. `model_dump(mode='json')` is the JSON contract (design.md)."""

    kb_version: str
    kb_hash: str = ""
    fingerprint: str
    incident_id: int | None = None
    host: str | None = None
    problems: list[ProblemMatch] = Field(default_factory=list)
    causes: list[CauseMatch] = Field(default_factory=list)
    facts: Facts = Field(default_factory=Facts)
    sizing: Sizing | None = None
    fixes: list[Fix] = Field(default_factory=list)
    withheld_fixes: list[WithheldFix] = Field(default_factory=list)
    guide: Guide | None = None
    input: InputStats = Field(default_factory=InputStats)
    excerpt: str = ""  # redacted, bounded: the lines that matter, for storage and display

    @property
    def matched(self) -> bool:
        return bool(self.problems)

    @property
    def top(self) -> ProblemMatch | None:
        return self.problems[0] if self.problems else None
