"""The model and GPU catalogs (knowledge/models/*.yaml, knowledge/gpus.yaml) and name lookup.

The arithmetic needs a model's KV geometry and a GPU's memory, but people name both loosely:
an HF id, a local checkpoint path, "Llama 3 70B", or nvidia-smi's "NVIDIA H100 80GB HBM3".
Lookup therefore compares normalised keys (case, separators, organisation prefix and a
quantisation suffix removed) instead of asking for an exact id. A raw HF config.json (a file or
a pasted dict) is read into the same `ModelSpec`, so a model the catalog lacks still sizes.
The catalogs are data, validated like the KB (unknown keys are errors with file and line), and
held in stdlib dataclasses so that importing this module costs `inferbot diagnose` nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import field, replace
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Literal

from bot.kb.loader import SHIPPED
from bot.lazyre import lazy
from bot.pickled import files_key, kept
from bot.structs import struct

_FORBID: dict[str, Any] = {"extra": "forbid"}


class UnknownName(ValueError):
    """A model or GPU the catalogs do not know; the message is one line with close matches.
    `kind`, `query` and `close` say it again for a front end that offers the matches."""

    def __init__(self, message: str, *, kind: str = "", query: str = "",
                 close: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.kind, self.query, self.close = kind, query, close


def _positive(**values: int | float | None) -> None:
    for key, value in values.items():
        if value is not None and value <= 0:
            raise ValueError(f"{key}: must be positive, got {value}")


@struct(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """What sizing needs from a model's config.json, plus its parameter count for weights."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _FORBID

    id: str
    aliases: list[str] = field(default_factory=list)
    model_type: str = ""
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    kv_lora_rank: int | None = None  # MLA latent width
    qk_rope_head_dim: int | None = None
    max_position_embeddings: int | None = None
    torch_dtype: str = "bfloat16"
    # Sliding-window attention: the window and how many layers use it (0 = none, all layers
    # full attention). Which layers slide is `sliding_pattern`: "all", "even" (Gemma 2: layer
    # i slides when i is even) or "every-N" (Gemma 3 style: layer i is global when (i+1) % N == 0).
    sliding_window: int | None = None
    sliding_layers: int = 0
    sliding_pattern: str = "even"
    weight_dtype: str | None = None  # the checkpoint's weight format when not torch_dtype
    params: float | None = None  # total parameter count
    active_params: float | None = None  # MoE: parameters each token uses (decode FLOPs)
    vocab_size: int | None = None
    source: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        _positive(num_hidden_layers=self.num_hidden_layers, hidden_size=self.hidden_size,
                  num_attention_heads=self.num_attention_heads,
                  num_key_value_heads=self.num_key_value_heads, head_dim=self.head_dim,
                  kv_lora_rank=self.kv_lora_rank, sliding_window=self.sliding_window,
                  max_position_embeddings=self.max_position_embeddings, params=self.params,
                  active_params=self.active_params)
        if not re.fullmatch(r"all|even|every-[1-9][0-9]?", self.sliding_pattern):
            raise ValueError("sliding_pattern: one of all, even, every-N")

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    def sliding_mask(self) -> list[bool]:
        """Per layer: True when the layer is sliding-window (the hybrid manager's split)."""
        n = self.num_hidden_layers
        if not self.sliding_layers or self.sliding_window is None:
            return [False] * n
        if self.sliding_layers >= n or self.sliding_pattern == "all":
            return [True] * n
        if self.sliding_pattern.startswith("every-"):
            period = int(self.sliding_pattern.removeprefix("every-"))
            return [(i + 1) % period != 0 for i in range(n)]
        return [i % 2 == 0 for i in range(n)]


@struct(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """A GPU model from knowledge/gpus.yaml: memory, bandwidth, compute, features."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _FORBID

    id: str
    name: str
    aliases: list[str] = field(default_factory=list)
    memory_mib: float
    bandwidth_gbs: float  # GB/s (10^9 bytes)
    bf16_tflops: float  # dense
    compute_capability: str
    source: str = ""

    def __post_init__(self) -> None:
        _positive(memory_mib=self.memory_mib, bandwidth_gbs=self.bandwidth_gbs,
                  bf16_tflops=self.bf16_tflops)

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024


@struct(frozen=True, slots=True, kw_only=True)
class GpuCatalog:
    """knowledge/gpus.yaml."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _FORBID

    gpus: list[GpuSpec]


@struct(frozen=True, slots=True, kw_only=True)
class ResolvedModel:
    """A lookup result: the spec, where it came from, and the quantisation the name implied."""

    spec: ModelSpec
    origin: Literal["catalog", "config"]
    quantization: str | None = None
    # a 16-bit build the name states ("DeepSeek-R1-BF16"): the catalog model's geometry, but
    # not its FP8 checkpoint's bytes per parameter
    precision: str | None = None
    query: str = ""

    @property
    def weight_dtype(self) -> str | None:
        """The checkpoint's weight format, as far as the name and the catalog say."""
        return self.precision or self.spec.weight_dtype


# Suffixes that name a quantised checkpoint of the same architecture. The KV geometry is the
# base model's; only the weights shrink (vllm-memory.md 2.1).
_QUANT_SUFFIX = lazy(
    r"[-_.](awq|gptq|fp8|fp8[-_]dynamic|int4|int8|w4a16|w8a8|w8a16|nvfp4|mxfp4|bnb[-_]4bit|"
    r"4bit|8bit|gguf|exl2)(?:[-_.].*)?$",
    re.IGNORECASE,
)
_PRECISION_SUFFIX = lazy(r"[-_.](bf16|bfloat16|fp16|f16|float16)$", re.IGNORECASE)
_QUANT_CANON = {"4bit": "bnb-4bit", "bnb_4bit": "bnb-4bit", "8bit": "int8", "fp8_dynamic": "fp8",
                "fp8-dynamic": "fp8", "w8a8": "fp8", "int4": "gptq", "w4a16": "gptq"}
_VARIANT = lazy(r"(instruct|chat|it|hf|base)$")


def _close_matches(key: str, options: list[str], cutoff: float) -> list[str]:
    """Suggestions for an unknown name (difflib is imported only when one is needed)."""
    import difflib

    return difflib.get_close_matches(key, options, n=4, cutoff=cutoff)


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _model_keys(name: str) -> tuple[str, str]:
    """(normalised key, key without a trailing instruct/chat/it/base variant)."""
    k = _key(name.rstrip("/").split("/")[-1])
    k = k.removeprefix("meta") if k.startswith("metallama") else k
    return k, _VARIANT.sub("", k)


@cache
def _catalog(root: Path) -> tuple[dict[str, ModelSpec], dict[str, GpuSpec]]:
    """Both catalogs, validated once and kept between runs (bot.pickled), so sizing adds no
    YAML or pydantic cost to a diagnosis."""
    files = [*sorted((root / "models").glob("*.yaml")), root / "gpus.yaml"]

    def build() -> tuple[dict[str, ModelSpec], dict[str, GpuSpec]]:
        from bot.kb.yamlio import load  # only on a cache miss

        models = {spec.id: spec for spec in (load(p).validate(ModelSpec) for p in files[:-1])}
        return models, {g.id: g for g in load(files[-1]).validate(GpuCatalog).gpus}

    return kept("catalog", files_key(files), [ModelSpec, GpuSpec, GpuCatalog], build,
                lambda found: isinstance(found, tuple) and len(found) == 2)


def models(root: Path = SHIPPED) -> dict[str, ModelSpec]:
    """All catalog models by id (validated; a bad file raises KBError with file and line)."""
    return _catalog(root)[0]


def gpus(root: Path = SHIPPED) -> dict[str, GpuSpec]:
    return _catalog(root)[1]


@cache
def _model_index(root: Path = SHIPPED) -> dict[str, str]:
    index: dict[str, str] = {}
    for spec in models(root).values():
        for name in (spec.id, *spec.aliases):
            for k in _model_keys(name):
                index.setdefault(k, spec.id)
    return index


def split_quantization(name: str) -> tuple[str, str | None]:
    """'Qwen3-Coder-30B-A3B-Instruct-FP8' -> ('Qwen3-Coder-30B-A3B-Instruct', 'fp8')."""
    base = name.rstrip("/")
    last = base.split("/")[-1]
    m = _QUANT_SUFFIX.search(last)
    if not m:
        return base, None
    q = m.group(1).lower()
    return base[: len(base) - len(last) + m.start()], _QUANT_CANON.get(q, q)


def _split_precision(name: str) -> tuple[str, str | None]:
    """'unsloth/DeepSeek-R1-BF16' -> ('unsloth/DeepSeek-R1', 'bfloat16')."""
    m = _PRECISION_SUFFIX.search(name)
    if m is None:
        return name, None
    return name[: m.start()], "bfloat16" if m.group(1).lower().startswith("b") else "float16"


def resolve_model(name_or_path: str | dict[str, Any], root: Path = SHIPPED,
                  read_files: bool = False) -> ResolvedModel:
    """A model from a catalog name, HF id, local path, free text or a config.json (a dict, a
    pasted JSON text, or with `read_files` a file / checkpoint folder on this machine).

    `read_files` is off by default: a path in a pasted log names a file on the GPU host, and
    chat text must never make the bot read files of its own. Raises UnknownName listing close
    catalog matches when nothing fits.
    """
    if isinstance(name_or_path, dict):
        return ResolvedModel(spec=spec_from_config(name_or_path), origin="config",
                             quantization=_config_quantization(name_or_path))
    query = name_or_path.strip()
    text_cfg = _maybe_config_text(query, read_files)
    if text_cfg is not None:
        return resolve_model(text_cfg, root)
    base, quant = split_quantization(query)
    base, precision = _split_precision(base)
    index = _model_index(root)
    for k in _model_keys(base):
        if k in index:
            return ResolvedModel(spec=models(root)[index[k]], origin="catalog",
                                 quantization=quant, precision=precision, query=query)
    loose = _loose_match(base, root)
    if loose is not None:
        return ResolvedModel(spec=loose, origin="catalog", quantization=quant,
                             precision=precision, query=query)
    close = _close_matches(_model_keys(base)[0], list(index), 0.6)
    ids = list(dict.fromkeys(index[c] for c in close))
    hint = f"; close: {', '.join(ids)}" if ids else ""
    raise UnknownName(f"unknown model {query!r} (pass a config.json instead){hint}",
                      kind="model", query=query, close=tuple(ids))


_LOOSE_NAME = lazy(r"(?P<family>llama|qwq|qwen|mistral|mixtral|deepseek|gemma|phi|yi|glm)"
                   r"[\w .-]{0,24}?(?<![\d.])(?P<size>\d{1,4}(?:\.\d)?)b\b", re.IGNORECASE)


def _loose_match(name: str, root: Path) -> ModelSpec | None:
    """A family and a size as people say them ("llama 8b", "qwen 72b"): the catalog's newest
    model of that family whose name carries that size. None when the catalog has none, rather
    than a model of another size."""
    m = _LOOSE_NAME.search(name.rsplit("/", 1)[-1])
    if m is None:
        return None
    family, size = m.group("family").lower(), m.group("size").lower()
    # the total size, not an MoE's active one ("480b-a35b" is not 35B)
    sized = re.compile(rf"(?<![\w.]){re.escape(size)}b(?![a-z0-9])")
    found = [spec for spec in models(root).values()
             if family in _short(spec.id) and sized.search(_short(spec.id))]
    return max(found, key=lambda sp: _version(_short(sp.id), family), default=None)


def _short(model_id: str) -> str:
    return model_id.rsplit("/", 1)[-1].lower()


def _version(name: str, family: str) -> float:
    """The family's version in a name ("llama-3.1-8b" -> 3.1): newer wins a loose match."""
    m = re.search(rf"{re.escape(family)}[-_ ]?(\d{{1,2}}(?:\.\d)?)(?![\d.]*b)", name)
    return float(m.group(1)) if m else 0.0


def _maybe_config_text(query: str, read_files: bool) -> dict[str, Any] | None:
    """A pasted config.json, or (read_files) a config.json file or a folder holding one."""
    if query.startswith("{"):
        try:
            value = json.loads(query)
        except json.JSONDecodeError as exc:
            raise UnknownName(f"pasted config.json is not valid JSON: {exc}") from None
        return value if isinstance(value, dict) else None
    if not read_files or len(query) > 4096:
        return None
    path = Path(query).expanduser()
    try:
        if path.is_dir() and (path / "config.json").is_file():
            path = path / "config.json"
        if path.is_file() and path.suffix == ".json":
            value = json.loads(path.read_text(encoding="utf-8"))
            return value if isinstance(value, dict) else None
    except (OSError, json.JSONDecodeError) as exc:
        raise UnknownName(f"cannot read {query}: {exc}") from None
    return None


def _config_quantization(cfg: dict[str, Any]) -> str | None:
    q = cfg.get("quantization_config")
    if isinstance(q, dict):
        method = q.get("quant_method")
        return str(method).lower() if method else "quantized"
    return None


def _first(cfg: dict[str, Any], *names: str) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return None


def spec_from_config(config: dict[str, Any]) -> ModelSpec:
    """A ModelSpec from an HF config.json, reading the same fields vLLM reads (vllm-memory.md 6).

    Multimodal configs keep the language model in `text_config`. The parameter count is not in
    config.json; it is estimated from the shapes (see `_estimate_params`).
    """
    cfg = dict(config)
    text = cfg.get("text_config")
    if isinstance(text, dict):
        cfg = {**cfg, **text}
    model_type = str(cfg.get("model_type") or "")
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    heads = _first(cfg, "num_attention_heads", "n_head")
    if not (layers and hidden and heads):
        raise UnknownName("config.json lacks num_hidden_layers / hidden_size / "
                          "num_attention_heads")
    kv_heads = _first(cfg, "n_head_kv", "num_kv_heads", "num_key_value_heads",
                      "multi_query_group_num")
    mla = model_type in ("deepseek_v2", "deepseek_v3", "deepseek_mtp", "kimi_k2") and bool(
        cfg.get("kv_lora_rank"))
    window = cfg.get("sliding_window")
    n_sliding, pattern = _sliding_layout(cfg, model_type, int(layers), window)
    max_pos = _first(cfg, "max_position_embeddings", "n_positions", "max_seq_len", "seq_len",
                     "max_sequence_length")
    name = str(cfg.get("_name_or_path") or cfg.get("name_or_path") or f"config:{model_type}")
    spec = ModelSpec(
        id=name, model_type=model_type, num_hidden_layers=int(layers), hidden_size=int(hidden),
        num_attention_heads=int(heads),
        num_key_value_heads=int(kv_heads) if kv_heads else None,
        head_dim=int(cfg["head_dim"]) if cfg.get("head_dim") else None,
        kv_lora_rank=int(cfg["kv_lora_rank"]) if mla else None,
        qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0) if mla else None,
        max_position_embeddings=int(max_pos) if max_pos else None,
        torch_dtype=str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
        sliding_window=int(window) if window and n_sliding else None,
        sliding_layers=n_sliding, sliding_pattern=pattern,
        vocab_size=int(cfg["vocab_size"]) if cfg.get("vocab_size") else None,
        source="config.json",
    )
    return replace(spec, params=_estimate_params(cfg, spec))


def _sliding_layout(cfg: dict[str, Any], model_type: str, layers: int, window: Any
                    ) -> tuple[int, str]:
    """How many layers slide, following the model's own convention (vllm-memory.md 6)."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        n = sum(1 for t in types if "sliding" in str(t))
        return n, "even" if model_type.startswith("gemma2") else f"every-{_period(types)}"
    if not window:
        return 0, "even"
    if model_type == "gemma2":
        return (layers + 1) // 2, "even"
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:
        return layers - layers // pattern, f"every-{pattern}"
    if cfg.get("use_sliding_window") is False or model_type == "phi3":
        # Qwen2 ships a window but disables it; Phi-3's window is not applied by vLLM's
        # model code in most versions (model_configs.json note), so size as full attention.
        return 0, "even"
    return layers, "all"


def _period(types: list[Any]) -> int:
    """The distance between global layers in a layer_types list (Gemma 3: 6)."""
    full = [i for i, t in enumerate(types) if "sliding" not in str(t)]
    return full[1] - full[0] if len(full) > 1 else len(types)


def _estimate_params(cfg: dict[str, Any], spec: ModelSpec) -> float | None:
    """Parameter count from the shapes: attention + MLP (dense or MoE) per layer + embeddings.

    Good to a few percent for Llama/Qwen/Mistral-style models; used only for weight estimates,
    which are always labelled as estimates.
    """
    h = spec.hidden_size
    inter = cfg.get("intermediate_size")
    vocab = spec.vocab_size or 0
    if not inter:
        return None
    head = spec.head_dim or h // spec.num_attention_heads
    kv = spec.num_key_value_heads or spec.num_attention_heads
    attn = h * head * (2 * spec.num_attention_heads + 2 * kv)
    experts = _first(cfg, "num_experts", "num_local_experts", "n_routed_experts") or 0
    moe_inter = _first(cfg, "moe_intermediate_size") or inter
    shared = int(cfg.get("n_shared_experts") or 0)
    mlp = 3 * h * (int(moe_inter) * (int(experts) + shared) if experts else int(inter))
    tied = bool(cfg.get("tie_word_embeddings"))
    return float(spec.num_hidden_layers * (attn + mlp) + vocab * h * (1 if tied else 2))


_GPU_NOISE = lazy(r"\b(nvidia|geforce|tesla|amd|instinct|radeon)\b", re.IGNORECASE)


@cache
def _gpu_index(root: Path = SHIPPED) -> dict[str, str]:
    index: dict[str, str] = {}
    for g in gpus(root).values():
        for name in (g.id, g.name, *g.aliases):
            index.setdefault(_key(_GPU_NOISE.sub("", name)), g.id)
    return index


def resolve_gpu(name: str, root: Path = SHIPPED) -> GpuSpec:
    """A GPU from nvidia-smi's name or a short one ("A100", "RTX 4090", "Tesla V100-SXM2-32GB").

    An exact normalised alias wins; otherwise the longest alias contained in the name (so
    "H100 PCIe 80GB" is the PCIe card, not the SXM default). Raises UnknownName otherwise.
    """
    key = _key(_GPU_NOISE.sub("", name))
    index = _gpu_index(root)
    table = gpus(root)
    if key in index:
        return table[index[key]]
    contained = [k for k in index if k and k in key]
    if key and contained:
        return table[index[max(contained, key=len)]]
    close = _close_matches(key, list(index), 0.5)
    names = list(dict.fromkeys(table[index[c]].name for c in close))
    hint = f"; close: {', '.join(names)}" if names else f"; known: {', '.join(sorted(table))}"
    raise UnknownName(f"unknown GPU {name!r}{hint}", kind="gpu", query=name,
                      close=tuple(names))
