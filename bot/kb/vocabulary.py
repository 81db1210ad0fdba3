"""The names a KB entry may use, declared here, where the loader reads them: the conditions a
cause, fix or problem names, and the values a fix template may fill in.

The sizing side implements them (bot.sizing.checks registers a function per condition,
bot.sizing.plan computes the planned values) and a test keeps the two sets equal, so a KB
entry naming something the code does not compute is refused at load, and code computing a
value the KB cannot name is a failing test, not dead weight.
"""

from __future__ import annotations

from bot.schema import Facts, Sizing, SizingFigures, field_names

# What a cause's `supports: {when: ...}` and `rules_out:`, a fix's `withhold_if:` and a
# problem's `claims:`, `implied_by:` and `ruled_out_by:` may name. Each is a function of the
# facts and the sizing that returns the sentence proving it, or None.
CONDITIONS: frozenset[str] = frozenset({
    "activation_peak_large", "already_eager", "already_quantized", "bf16_on_pre_ampere",
    "chunked_prefill_off_long_context", "cuda_graph_abnormal", "cuda_graph_large",
    "foreign_process_holds_memory",
    "fp8_kv_would_fit", "full_precision_fp32", "gpu_below_volta", "gpu_count_unknown",
    "host_has_enough_gpus", "in_cuda_graph_capture", "in_sampler_warmup",
    "kv_cache_already_fp8", "kv_cache_short", "kv_fits_only_a_tiny_context",
    "kv_needed_exceeds_available", "kv_pressure", "kv_tokens_below_max_model_len",
    "kv_usage_low", "large_batched_tokens", "lmdeploy_default_pool", "max_model_len_fits",
    "max_num_seqs_large",
    "memory_in_use_before_start", "memory_outside_pytorch", "multimodal_model", "no_kv_memory",
    "no_spare_gpus", "non_torch_implausible", "nothing_fits", "only_server_on_gpu",
    "oom_not_a_shortage", "other_process_memory", "profile_implausible",
    "server_memory_outside_pytorch", "several_engines_on_gpu", "spare_gpus",
    "startup_free_check_failed", "tgi_warmup_prefill",
    "trainer_pool_large", "trainer_shares_gpu", "training_run", "utilization_at_safe_max",
    "utilization_cannot_fit", "utilization_high", "utilization_low", "utilization_would_fit",
    "weights_cannot_load", "weights_dominate_budget", "weights_exceed_budget_at_safe_max",
    "weights_exceed_common_gpu", "weights_exceed_gpu", "weights_exceed_one_gpu_unsharded",
    "weights_fill_budget", "weights_fill_one_gpu_unsharded", "weights_small_in_budget",
})

# Values the fix planner works out for templates, beyond the facts and the sizing's figures
# (None = unknown: a fix needing an unknown value falls back to its `fallback_command` or is
# not offered).
PLANNED_VALUES: dict[str, str] = {
    "model_or_placeholder": "the model name, or MODEL when the evidence does not show it",
    "fit_max_model_len": "largest --max-model-len that fits the available KV (block-rounded)",
    "suggested_max_model_len": "a round value <= fit_max_model_len (e.g. 32768), for configs",
    "suggested_gpu_memory_utilization": "utilization that fits, within the safe 0.90-0.95 range",
    "utilization_fitting_free_memory": "largest utilization the free memory allows (foreign use)",
    "suggested_tensor_parallel_size": "smallest TP size (divides heads) whose budget fits",
    "fp8_target_max_model_len": "the asked length if it fits with fp8 KV, else fp8_max_model_len",
    "kv_bytes_per_token_h": "KV bytes per token, human readable (e.g. '128 KiB')",
    "kv_needed_at_fit_gib": "KV needed for one request at fit_max_model_len",
    "foreign_processes_h": "other processes holding GPU memory: 'pid 4242 python 20.00 GiB'",
    "gpu_count_h": "GPUs seen on the host",
    "utilization_effect_h": "what suggested_gpu_memory_utilization gives, e.g. '9.87 GiB of KV'",
}


def template_values() -> frozenset[str]:
    """Every name a fix template may use: each fact, each sizing number and working figure
    (docs/contracts.md), and the planned values."""
    sizing = set(field_names(Sizing)) - {"extra"}  # the figures are named one by one
    return frozenset(set(field_names(Facts)) | sizing | set(field_names(SizingFigures))
                     | set(PLANNED_VALUES))
