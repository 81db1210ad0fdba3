"""Server settings as users and servers write them down.

The same setting arrives as a CLI flag (`--max-model-len 8192`, `--max_model_len=8192`, `-tp 2`),
a YAML key (`mem-fraction-static: 0.95`), a Python keyword (`LLM(tensor_parallel_size=8)`), or in
the server's own echo of its arguments (`non-default args: {...}`, `Namespace(...)`,
`ServerArgs(...)`, `... with config: model='...', max_seq_len=...`). All of them go through one
table of names, so vLLM, SGLang, TGI and lmdeploy spellings land in the same facts.

Flags are read only where a command is written. vLLM's hints ("use '--enforce-eager'") and
suggestions ("--gpu-memory-utilization=0.8800") are not settings. Secret-bearing flags
(--api-key, tokens) have no entry in the table, so their values never become facts.
"""

from __future__ import annotations

import ast
import re
from typing import Any, ClassVar

from bot.evidence.base import FactSink, Line
from bot.evidence.redact import redact
from bot.evidence.units import KINDS, convert, to_bool, to_float
from bot.lazyre import LazyPattern, lazy

# dashed name -> fact. Underscores are read as dashes.
SETTINGS: dict[str, str] = {
    "model": "model", "model-path": "model", "model-id": "model",
    "max-model-len": "max_model_len", "max-seq-len": "max_model_len",
    "context-length": "max_model_len",
    "gpu-memory-utilization": "gpu_memory_utilization",
    "tensor-parallel-size": "tensor_parallel_size", "tp": "tensor_parallel_size",
    "tp-size": "tensor_parallel_size", "num-shard": "tensor_parallel_size",
    "pipeline-parallel-size": "pipeline_parallel_size", "pp": "pipeline_parallel_size",
    "pp-size": "pipeline_parallel_size",
    "data-parallel-size": "data_parallel_size", "dp": "data_parallel_size",
    "dp-size": "data_parallel_size",
    "kv-cache-dtype": "kv_cache_dtype",
    "block-size": "block_size",
    "max-num-seqs": "max_num_seqs",
    "max-num-batched-tokens": "max_num_batched_tokens",
    "enable-chunked-prefill": "enable_chunked_prefill",
    "chunked-prefill-enabled": "enable_chunked_prefill",
    "enforce-eager": "enforce_eager",
    "cpu-offload-gb": "cpu_offload_gb",
    "kv-cache-memory": "kv_cache_memory_bytes", "kv-cache-memory-bytes": "kv_cache_memory_bytes",
    "swap-space": "swap_space_gib",
    "quantization": "quantization", "quantize": "quantization", "q": "quantization",
    "load-in-low-bit": "quantization",  # ipex-llm's vLLM: sym_int4, fp8, ...
    "dtype": "dtype",
    "mem-fraction-static": "mem_fraction_static",
    "cache-max-entry-count": "cache_max_entry_count", "session-len": "max_model_len",
    "max-total-tokens": "max_total_tokens",
    "max-batch-prefill-tokens": "max_batch_prefill_tokens",
    "max-input-length": "max_input_length", "max-input-tokens": "max_input_length",
}
_SHORT = {"tp", "pp", "dp", "q"}  # single-dash spellings vLLM accepts
_NONE = {"", "none", "null", "auto-detect"}

# Lines that write a command rather than talk about one.
_COMMANDS = ("vllm serve", "api_server", "launch_server", "text-generation-launcher",
             "docker run", "python -m", "python3 -m", "vllm.entrypoints", "sglang.launch",
             "lmdeploy serve")
_ECHOES = ("Namespace(", "ServerArgs(", "with config:")
# Python calls that take settings as keywords: vLLM's LLM(...), lmdeploy's
# TurbomindEngineConfig(...) / PytorchEngineConfig(...)
_CALLS = ("LLM(", "EngineConfig(")
# Request logs quote user prompts, which may well mention flags.
_CHATTER = ("Received request", "prompt: ")

_TOKEN = lazy(r"\"[^\"]{0,512}\"|'[^']{0,512}'|\S{1,512}")
_KWARG = lazy(
    r"""(?<![\w.])(\w{1,48})\s{0,3}=\s{0,3}(?:'([^'\n]{0,512})'|"([^"\n]{0,512})"|"""
    r"""["']?([^\s,'")\]}]{1,512}))""")
# A script's own constant, `MODEL_PATH = "/models/Qwen2-VL-72B-Instruct"`, which a call
# then names bare: `LLM(model=MODEL_PATH)`
_ASSIGN = lazy(r"""^\s{0,12}(?P<name>[A-Za-z_]\w{0,40})\s{0,3}=\s{0,3}"""
               r"""(?:'(?P<a>[^'\n]{1,300})'|"(?P<b>[^"\n]{1,300})")\s{0,3}(?:#.{0,200})?$""")
_IDENTIFIER = lazy(r"[A-Za-z_]\w{0,40}")
_PY_CONSTANTS = ("True", "False", "None")
_DICT_ITEM = lazy(r"""['"](\w{1,48})['"]\s{0,3}:\s{0,3}(?:'([^']{0,512})'|"([^"]{0,512})"|"""
                        r"""([^\s,'"}\]]{1,512}))""")
_YAML = lazy(
    r"""^\s{0,40}(?:-\s{1,4})?["']?([A-Za-z][\w-]{0,47})["']?\s{0,4}:\s{1,4}"""
    r"""(?:"([^"]{0,512})"|'([^']{0,512})'|([^\s#'"]{1,512}))\s{0,40}(?:#.{0,512})?$""")
# TGI's launcher echo: `Args { model_id: "x", num_shard: Some(2), quantize: Some(Eetq), ... }`
_RUST_FIELD = lazy(r"""(\w{1,48}): (?:Some\()?(?:"([^"]{0,512})"|([\w.-]{1,64}))""")
_HUMAN_INT = lazy(r"^(\d{1,15}(?:\.\d{1,6})?)([kmgtKMGT]?)(?:i?B)?$")
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _yaml_anchors() -> tuple[str, ...]:
    """`key:` spellings cut to their last word, so one anchor serves several keys. Config files
    (vLLM `--config`, SGLang recipes) spell keys with dashes; underscored keys arrive in the
    servers' echoes, which have their own anchors. A bare `model:` is too common to be an
    anchor (a YAML model name is still read when its line is offered for another reason)."""
    out = [f"-{key.rsplit('-', 1)[-1]}:" if "-" in key else f"{key}:"
           for key in SETTINGS if len(key) > 2 and key != "model"]
    return tuple(dict.fromkeys(out))


# What `--model` names in an evaluation harness's command (`lm_eval --model vllm
# --model_args pretrained=...`): the backend, not a model.
_BACKENDS = frozenset({"hf", "hf-auto", "hf-multimodal", "vllm", "vllm-vlm", "sglang",
                       "openai", "openai-completions", "openai-chat-completions",
                       "local-completions", "local-chat-completions"})


def apply_setting(key: str, raw: Any, sink: FactSink, line_no: int) -> None:
    """Record setting `key` (any spelling) with value `raw` as written; unknown keys are ignored."""
    name = key.strip().lstrip("-").replace("_", "-").lower()
    negated = name.startswith("no-") and name[3:] in SETTINGS
    fact = SETTINGS.get(name[3:] if negated else name)
    if fact is None:
        return
    if KINDS[fact] == "bool":
        value: Any = True if raw is None or raw is True else to_bool(str(raw))
        sink.set(fact, (not value) if negated and value is not None else value, line_no)
        return
    if raw is None or isinstance(raw, bool | list | dict):
        return
    # quotes, and markdown's backticks around a command pasted inline, are not the value's
    text = str(raw).strip().strip("'\"`")
    if text.lower() in _NONE or "$" in text or redact(text) != text:
        return  # unset, a shell variable, or a secret: none of them is a fact
    if fact == "kv_cache_memory_bytes" or (KINDS[fact] == "int" and not text.isdigit()):
        # vLLM reads integer flags human-readably: 32k = 32000, 32K = 32768
        sink.set(fact, _human_int(text), line_no)
    elif fact == "model":
        if text.lower() not in _BACKENDS:
            # a sentence's full stop or comma after the name, or the backticks closing an
            # inline command, are not part of it: model ids hold dots ("Qwen2.5-7B") but never
            # end in one
            sink.set(fact, text.rstrip("/.,;:!?`'\"") or None, line_no)
    elif fact in ("dtype", "kv_cache_dtype", "quantization"):
        sink.set(fact, text.removeprefix("torch.").lower(), line_no)
    else:
        sink.set(fact, convert(fact, text), line_no)


def _human_int(text: str) -> int | None:
    m = _HUMAN_INT.match(text)
    if not m:
        return None
    return int(float(m.group(1)) * _SCALE[m.group(2)])


def _pairs(pattern: LazyPattern, text: str) -> list[tuple[str, str]]:
    """(key, value) for each match: group 1 is the key, the first other group that took part is
    the value (quoted and bare spellings are alternatives)."""
    return [(m.group(1), next((g for g in m.groups()[1:] if g is not None), ""))
            for m in pattern.finditer(text)]


def _apply_pairs(pattern: LazyPattern, text: str, sink: FactSink, line_no: int) -> None:
    for key, value in _pairs(pattern, text):
        apply_setting(key, value, sink, line_no)


class FlagsExtractor:
    name: ClassVar[str] = "flags"
    anchors: ClassVar[tuple[str, ...]] = (
        "--", "vllm serve", "lmdeploy serve", "non-default args", *_ECHOES, *_CALLS, "Args {",
        '= "', "= '", *_yaml_anchors())
    follow: ClassVar[int] = 12  # continuation lines of `LLM(` calls and `\` commands

    def __init__(self) -> None:
        self._in_call = False
        self._continued = False
        self._model_next = False  # `vllm serve \` ended the line: the model starts the next
        self._names: dict[str, str] = {}  # a pasted script's string constants
        self._call_keys: set[str] = set()  # the keywords the current call has passed

    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text
        if any(c in text for c in _CHATTER):
            return
        stripped = text.strip()
        continued, self._continued = self._continued, stripped.endswith("\\")
        if "non-default args" in text:
            self._dict(text[text.index("non-default args"):], sink, line.no)
        elif any(e in text for e in _ECHOES):
            _apply_pairs(_KWARG, text, sink, line.no)
        elif "Args {" in text:
            _apply_pairs(_RUST_FIELD, text, sink, line.no)
        elif (opener := next((c for c in _CALLS if c in text), None)) is not None:
            call = text[text.index(opener) + len(opener):]
            self._in_call = ")" not in call
            self._call_keys = set()
            self._call_args(call, sink, line.no)
            if not self._in_call:
                self._call_closed(sink, line.no)
        elif self._in_call:
            self._in_call = not stripped.startswith(")")
            self._call_args(text, sink, line.no)
            if not self._in_call:
                self._call_closed(sink, line.no)
        elif (assigned := _ASSIGN.match(text)) is not None:
            self._names[assigned["name"]] = assigned["a"] or assigned["b"]
        elif continued or _is_command(text, stripped):
            self._command(text, sink, line.no)
        else:
            _apply_pairs(_YAML, text, sink, line.no)

    def finish(self, sink: FactSink) -> None:
        self._in_call = self._continued = self._model_next = False
        self._names.clear()

    def _call_args(self, text: str, sink: FactSink, line_no: int) -> None:
        """A Python call's keyword arguments: a bare name is the script's variable, its value
        the string constant assigned to it above, else unknown (never the name itself)."""
        for m in _KWARG.finditer(text):
            value = next((g for g in m.groups()[1:] if g is not None), "")
            if (m.group(4) is not None and _IDENTIFIER.fullmatch(value)
                    and value not in _PY_CONSTANTS):
                if value not in self._names:
                    continue
                value = self._names[value]
            self._call_keys.add(m.group(1))
            apply_setting(m.group(1), value, sink, line_no)

    def _call_closed(self, sink: FactSink, line_no: int) -> None:
        """A whole `LLM(...)` call shows every argument: without tensor_parallel_size the
        engine runs on one GPU, however many the host has."""
        if not self._call_keys & {"tensor_parallel_size", "tp", "tp_size"}:
            sink.set_default("tensor_parallel_size", 1, line_no)

    @staticmethod
    def _dict(text: str, sink: FactSink, line_no: int) -> None:
        start, end = text.find("{"), text.rfind("}")
        if start == -1:
            return
        body = text[start : end + 1] if end > start else text[start:]
        items: list[tuple[str, Any]]
        try:
            parsed = ast.literal_eval(body)
            items = list(parsed.items()) if isinstance(parsed, dict) else []
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            # Values such as CompilationConfig(...) are not literals: read the plain items.
            items = list(_pairs(_DICT_ITEM, body))
        for key, value in items:
            apply_setting(str(key), value, sink, line_no)

    def _command(self, text: str, sink: FactSink, line_no: int) -> None:
        tokens = [t.strip("'\"`") for t in _TOKEN.findall(text)]
        if self._model_next and tokens and tokens[0] != "\\":
            self._model_next = False
            if not tokens[0].startswith("-"):
                apply_setting("model", tokens[0], sink, line_no)
        for i, tok in enumerate(tokens):
            if _names_model_next(tokens, i):
                nxt = tokens[i + 1]
                if nxt == "\\":
                    self._model_next = True
                elif not nxt.startswith("-"):
                    apply_setting("model", nxt, sink, line_no)
                continue
            if not tok.startswith("-") or tok in ("-", "--") or _is_number(tok):
                continue
            if not tok.startswith("--") and tok[1:].split("=", 1)[0] not in _SHORT:
                continue
            name, eq, value = tok.partition("=")
            if eq:
                apply_setting(name, value, sink, line_no)
                continue
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if nxt is None or (nxt.startswith("-") and not _is_number(nxt)) or nxt == "\\":
                apply_setting(name, True, sink, line_no)
            else:
                apply_setting(name, nxt, sink, line_no)


def _names_model_next(tokens: list[str], i: int) -> bool:
    """The model is the positional argument after `vllm serve` and `lmdeploy serve
    api_server`."""
    if i + 1 >= len(tokens):
        return False
    if tokens[i] == "serve":
        return i > 0 and tokens[i - 1].endswith("vllm")
    return (tokens[i] == "api_server" and i > 1 and tokens[i - 1] == "serve"
            and tokens[i - 2].endswith("lmdeploy"))


def _is_number(tok: str) -> bool:
    return to_float(tok) is not None


def _is_command(text: str, stripped: str) -> bool:
    if any(c in text for c in _COMMANDS):
        return True
    return stripped.startswith(("--", "- --", "$ ", "+ ")) or re.match(r"^-\w{1,3} ", stripped) \
        is not None
