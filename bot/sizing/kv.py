"""KV-cache bytes per token, per block and per request, exactly as vLLM computes them.

Every formula follows vLLM's own code (V1 `kv_cache_interface.py` / `kv_cache_utils.py`; V0
`CacheEngine.get_cache_block_size`): KV heads, not attention heads,
divided by TP with a floor of one head per rank; `head_dim` before hidden/heads; one latent
head and no K/V factor for MLA; only the PP stage's own layers; block-granular needs; and the
minimum over stages deciding the block count. Getting any of these wrong is off by 2x to 32x,
which is the whole difference between a right and a wrong `--max-model-len`.
"""

from __future__ import annotations

from bot.sizing.catalog import ModelSpec
from bot.structs import struct

GIB = 1 << 30
DEFAULT_BLOCK = 16
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # V1 OpenAI-server default on big GPUs (section 5)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kv_dtype_bytes(kv_cache_dtype: str | None) -> int:
    """1 for fp8 variants; else 2: under "auto" the cache follows the served dtype, and bf16,
    fp16 and fp32 checkpoints are all served in 16 bit by default."""
    kv = (kv_cache_dtype or "auto").lower()
    if kv.startswith("fp8"):
        return 1
    if kv in ("float32", "fp32"):
        return 4
    return 2


def pp_split(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage, as `get_pp_indices`: the remainder goes one layer at a time
    to the second-to-last stage, then towards the first (27/2 -> [14, 13])."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def head_size(spec: ModelSpec) -> int:
    """`ModelConfig.get_head_size`: MLA latent width, else head_dim, else hidden // heads."""
    if spec.is_mla:
        return (spec.kv_lora_rank or 0) + (spec.qk_rope_head_dim or 0)
    return spec.head_dim or spec.hidden_size // spec.num_attention_heads


def kv_heads_per_rank(spec: ModelSpec, tp: int) -> int:
    """`get_num_kv_heads`: 1 for MLA; else max(1, kv_heads // tp) (replicated when kv < tp)."""
    if spec.is_mla:
        return 1
    total = spec.num_key_value_heads or spec.num_attention_heads
    return max(1, total // tp)


@struct(frozen=True)
class Stage:
    """One PP stage on one TP rank: its layers and what one block of them costs."""

    full_layers: int
    sliding_layers: int
    page_bytes: int  # one layer, one block (`page_size_bytes`)
    block_size: int
    window: int | None
    hybrid: bool  # the V1 hybrid manager saves memory on sliding layers

    @property
    def layers(self) -> int:
        return self.full_layers + self.sliding_layers

    @property
    def bytes_per_token(self) -> int:
        """Pool cost of one cached token across the stage's layers (sliding ones included)."""
        return self.page_bytes * self.layers // self.block_size

    def _groups(self) -> tuple[int, int, int]:
        """(group_size, full groups, sliding groups), `_get_kv_cache_groups_uniform_page_size`."""
        if not (self.hybrid and self.sliding_layers and self.full_layers):
            return self.layers, 1, 0
        lo, hi = sorted((self.full_layers, self.sliding_layers))
        size = hi if hi < 1.5 * lo else lo
        return size, cdiv(self.full_layers, size), cdiv(self.sliding_layers, size)

    @property
    def blocks_unit(self) -> int:
        """Bytes of one block count: the page times the layers sharing one block id."""
        return self.page_bytes * self._groups()[0]

    @property
    def num_groups(self) -> int:
        _, full, sliding = self._groups()
        return full + sliding

    def blocks_for(self, available_bytes: float) -> int:
        return max(0, int(available_bytes // self.blocks_unit))

    def tokens_for(self, blocks: int) -> int:
        """The logged "GPU KV cache size": blocks // groups * block_size."""
        return blocks // self.num_groups * self.block_size

    def request_blocks(self, length: int, max_num_batched_tokens: int) -> int:
        """Blocks (of `blocks_unit`) one request of `length` tokens needs (section 2.5/3)."""
        _, full, sliding = self._groups()
        need = full * cdiv(length, self.block_size)
        if sliding:
            window = self.window or length
            span = min(window - 1 + max_num_batched_tokens, length)
            need += sliding * (cdiv(span, self.block_size) + 1)
        return need

    def needed_bytes(self, length: int, max_num_batched_tokens: int) -> int:
        return self.request_blocks(length, max_num_batched_tokens) * self.blocks_unit

    def max_len(self, available_bytes: float, max_num_batched_tokens: int) -> int:
        """`estimate_max_model_len`: the largest length whose need fits (0 if none).

        For full attention this is floor(available / (page * layers)) * block_size; hybrid
        models need vLLM's binary search because the sliding groups' need saturates.
        """
        blocks = self.blocks_for(available_bytes)
        if self._groups()[2] == 0:
            return blocks * self.block_size
        lo, hi = 0, blocks * self.block_size * self.num_groups + (self.window or 0)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.request_blocks(mid, max_num_batched_tokens) <= blocks:
                lo = mid
            else:
                hi = mid - 1
        return lo


@struct(frozen=True)
class KvLayout:
    """A model's KV cache on one rank of a TP x PP deployment."""

    spec: ModelSpec
    tp: int
    pp: int
    dtype_bytes: int
    block_size: int
    stages: tuple[Stage, ...]

    @classmethod
    def build(cls, spec: ModelSpec, tp: int = 1, pp: int = 1, kv_cache_dtype: str | None = None,
              block_size: int | None = None, hybrid: bool = True) -> KvLayout:
        tp, pp = max(1, tp), max(1, pp)
        block = block_size or DEFAULT_BLOCK
        dtype = kv_dtype_bytes(kv_cache_dtype)
        factor = 1 if spec.is_mla else 2
        page = factor * block * kv_heads_per_rank(spec, tp) * head_size(spec) * dtype
        mask = spec.sliding_mask()
        stages = []
        start = 0
        for n in pp_split(spec.num_hidden_layers, pp):
            sliding = sum(mask[start:start + n])
            start += n
            stages.append(Stage(n - sliding if hybrid else n, sliding if hybrid else 0, page,
                                block, spec.sliding_window, hybrid))
        return cls(spec, tp, pp, dtype, block, tuple(stages))

    def with_(self, *, tp: int | None = None, kv_cache_dtype: str | None = None) -> KvLayout:
        """The same deployment with a different TP size or KV dtype (for what-ifs)."""
        hybrid = self.stages[0].hybrid
        dtype = kv_cache_dtype or ("fp8" if self.dtype_bytes == 1 else "auto")
        return KvLayout.build(self.spec, tp or self.tp, self.pp, dtype, self.block_size, hybrid)

    @property
    def deciding(self) -> Stage:
        """The stage with the most layers: with equal memory it gets the fewest blocks."""
        return max(self.stages, key=lambda s: s.blocks_unit)

    @property
    def bytes_per_token(self) -> int:
        return self.deciding.bytes_per_token

    @property
    def bytes_per_block(self) -> int:
        """One block across the deciding stage's layers (V0 `get_cache_block_size`)."""
        return self.deciding.page_bytes * self.deciding.layers

    def num_blocks(self, available: float | list[float]) -> int:
        """Blocks per worker, the minimum over stages (each with its own available bytes)."""
        per_stage = available if isinstance(available, list) else [available] * self.pp
        return min(s.blocks_for(a) for s, a in zip(self.stages, per_stage, strict=True))

    def tokens(self, blocks: int) -> int:
        return self.deciding.tokens_for(blocks)

    def needed_bytes(self, length: int, max_num_batched_tokens: int | None = None) -> int:
        mnbt = max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
        return max(s.needed_bytes(length, mnbt) for s in self.stages)

    def max_model_len(self, available: float | list[float],
                      max_num_batched_tokens: int | None = None) -> int:
        mnbt = max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
        per_stage = available if isinstance(available, list) else [available] * self.pp
        return min(s.max_len(a, mnbt) for s, a in zip(self.stages, per_stage, strict=True))

    def concurrency(self, blocks: int, length: int,
                    max_num_batched_tokens: int | None = None, v0: bool = False) -> float:
        """`get_max_concurrency_for_kv_cache_config`: blocks / blocks one request needs.

        V0 (and V1 before the hybrid allocator) divided tokens by the length instead; the two
        agree whenever the length is a multiple of the block size.
        """
        if v0:
            return blocks * self.block_size / length if length else 0.0
        mnbt = max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
        need = self.deciding.request_blocks(length, mnbt)
        return blocks / need if need else 0.0
