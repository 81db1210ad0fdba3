"""GPUs, models and the memory setting named in prose ("Running Llama 3 70B on A100 GPU",
"3x NVIDIA RTX 4090", "utilization is set to 0.6").

The lowest-priority source: every fact here is set only if nothing better is known, so a log or
an nvidia-smi paste always wins over what the user wrote in the question.
"""

from __future__ import annotations

import re
from typing import ClassVar

from bot.evidence.base import FactSink, Fold, Line, Probe
from bot.evidence.paste import is_prose
from bot.lazyre import lazy

# A GPU model: a family prefix and a model number, with an optional memory size.
_GPU = lazy(
    r"(?<![\w-])(?:(?P<count>\d{1,2}) ?[x×*] ?|(?P<said>two|three|four|six|eight) )?"
    r"(?P<name>(?:NVIDIA |Nvidia )?(?:GeForce |Tesla |Quadro )?"
    r"(?:RTX ?(?:PRO )?[A-Z]?\d{3,4}(?: ?Ti| ?Ada| D| SUPER)?|GTX ?\d{3,4}(?: ?Ti)?|"
    r"GB?[HB]?\d{3}|[AHLBVTP]\d{1,4}[A-Z]?(?:-SXM\d?|-PCIE)?)(?: ?\d{2,3} ?GB)?)"
    r"(?:(?: ?[x×*] ?)(?P<after>\d{1,2}))?(?![\w-])")
# A model size in billions/millions of parameters, or a Hugging Face repo id.
_FAMILY = lazy(
    r"(?<![\w./-])(?P<name>(?:Meta-)?(?:Llama|QwQ|Qwen|Mistral|Mixtral|DeepSeek|Gemma|Phi|"
    r"Falcon|CodeLlama|gpt-oss|Yi|GLM|Kimi|LLaVA|InternVL|InternLM|MiniCPM|Baichuan|Granite|"
    r"Nemotron|StarCoder|Vicuna|OLMo)[\w .-]{0,40})", re.IGNORECASE)
_SIZE = lazy(r"^(.{0,40}?\b\d{1,4}(?:\.\d{1,2})?[BbMm])(?![\w])")
_REPO = lazy(r"(?<![\w./-])(?P<repo>[A-Za-z0-9][\w.-]{0,40}/[A-Za-z0-9][\w.-]{0,80})"
                   r"(?![\w/-])")
_KNOWN_PARTS = lazy(r"(?:A100|A800|H100|H800|H200|H20|A10G?|A30|A40|L40S?|L4|T4|V100|P100|P40|"
                    r"B200)\b")
# The same parts as people type them in a hurry ("our a10", "h100 80g", "two 4090s").
_LOOSE_GPU = lazy(
    r"(?<![\w./-])(?:(?P<count>\d{1,2}|two|three|four|six|eight) ?[x×*]? ?)?"
    r"(?P<name>(?:rtx ?)?(?:a100|a800|a10g|a10|a30|a40|a6000|h100|h200|h800|h20|"
    r"l40s|l40|l4|t4|v100|p100|p40|b200|gb200|[345]0[6789]0(?: ?ti)?)"
    r"(?: ?(?:sxm\d?|pcie|nvl))?(?: ?\d{2,3} ?gb?)?)s?(?![\w-])", re.IGNORECASE)
_GPU_CONTEXT = lazy(r"\s{0,2}(?:GPU|\(|\d{2,3} ?GB)")
_NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "six": 6, "eight": 8}
# "3 GPUs", "two 24G cards", "8张A800" (a count with no model name next to it)
_COUNT = lazy(r"(?<![\w.])(?P<count>\d{1,2}) ?(?:x |\* )?(?:GPUs|gpus|GPU cards|cards|张)")
# "四张80g显卡", "两块A100", "一张4090", "8卡" (Chinese numerals and counters); not "三张图像"
_CN_COUNT = lazy(r"(?P<count>[一二两三四五六七八九十]|(?<![\dA-Za-z.])\d{1,2}) ?(?:卡|(?:张|块) ?"
                 r"(?:\d{2,3} ?[gG][bB]? ?)?(?:的)? ?"
                 r"(?:显卡|卡|GPU|gpu|[AHLVTB]\d{1,3}|RTX|[2345]0[5-9]0))")
_CN_NUMBERS = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
               "九": 9, "十": 10}
# Each GPU's memory said with the card: "80g显卡", "24G显存", "a 24GB GPU", "16GB VRAM"
_MEMORY_SAID = lazy(r"(?<![\dA-Za-z.])(?P<gib>\d{1,3}) ?(?:GB|G|g|gb|GiB) ?(?:的)? ?"
                    r"(?:显卡|显存|卡|(?:VRAM|vram|GPUs?|cards?)(?![A-Za-z]))")
# ... or after it, as Chinese often puts it: "每张卡显存22G", "显存为24GB"
_MEMORY_SAID_AFTER = lazy(r"(?:显存|显卡内存)(?:为|是|有|:|：)? ?(?P<gib>\d{1,3}) ?"
                          r"(?:GB|G|g|gb|GiB)(?![A-Za-z\d])")
# "utilization is set to be 0.6", "gpu_memory_utilization to 0.7", "mem-fraction-static 0.85"
# (vLLM's own hints print four decimals, "equivalent to --gpu-memory-utilization=0.8800": a
# value to try, not the setting; people write 0.9 or 0.95)
_UTIL = lazy(r"(?<!\w)(?P<key>gpu[_ -]?memory[_ -]?utili[sz]ation|mem[_ -]fraction[_ -]static|"
             r"\butili[sz]ation)\b(?: (?:is|was))?(?: set)?(?: (?:to|at|of))?(?: be)?\s{0,2}"
             r"[=:]?\s{0,2}(?P<value>0?\.\d{1,3}|1\.0{1,3})(?![\d%])", re.IGNORECASE)
# "Qwen3.8-27B (NVFP4)", "Qwen2.5-VL-32B-Instruct-AWQ", "Llama-3.1-70B-Instruct-2.4bpw-h6-exl2"
_QUANT_AFTER = lazy(r"(?:[-_.][-_.A-Za-z0-9]{0,60}?[-_]|[-_]|\s{0,2}[(\[]?\s{0,2})"
                    r"(?P<q>NVFP4|MXFP4|AWQ|GPTQ|FP8|INT4|INT8|W4A16|W8A8|EXL2|GGUF|"
                    r"\d(?:\.\d{1,2})?bpw)(?![a-z\d])", re.IGNORECASE)
# The context length a person says the application needs: "our app needs 32k context",
# "we need at least 65,536 tokens", "requires a context length of 128k", "需要32k上下文".
# Not a denial ("we don't need 128k context") and not a question of what fits.
_TOKEN_COUNT = r"\d{1,2},\d\d\d,\d\d\d|\d{1,3},\d\d\d|\d{1,7}"  # 1,048,576 / 65,536 / 32768
_LENGTH = rf"(?:{_TOKEN_COUNT})\s?(?:[kK](?![A-Za-z]))?\+?"
_LENGTH_VALUE = lazy(rf"(?P<n>{_TOKEN_COUNT})\s?(?P<k>[kK](?![A-Za-z]))?")
_NEED_SAID = lazy(
    r"(?<![\w'’])(?<!n't )(?<!not )(?<!no )(?:need|needs|require|requires|must support|"
    r"must handle)\b(?: to (?:support|handle|serve|process|fit))?"
    r"(?: (?:at least|a|an|the|full|up to)){0,2}\s{1,2}" + _LENGTH +
    r"\s{0,2}-?\s{0,2}(?:tokens?\b(?: (?:of )?context)?|(?:token )?context\b|ctx\b)"
    r"|(?<![\w'’])(?<!n't )(?<!not )(?:need|needs|require|requires)\b"
    r"(?: (?:a|the))? (?:context(?: length| window)?|max[_ -]model[_ -]len)"
    r"(?: (?:of|to be|=|at least)){1,2} " + _LENGTH +
    r"|(?:需要|至少|要求)(?:支持)?\s?" + _LENGTH + r"\s?(?:的)?\s?(?:上下文|tokens?|长度)"
    r"|上下文(?:长度)?(?:需要|要求|至少)(?:为|是)?\s?" + _LENGTH,
    re.IGNORECASE)
# "32k" as people write context sizes: a power of two (or 1.5 times one) of KiB tokens,
# else thousands ("100k")
_BINARY_K = frozenset({2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024})
_MAX_PROSE = 2000
_FAMILY_WORDS = ("llama", "qwen", "qwq", "mistral", "mixtral", "deepseek", "gemma", "phi-",
                 "falcon", "gpt-", "glm", "yi-", "kimi", "starcoder", "granite", "nemotron",
                 "llava", "internvl", "internlm", "minicpm", "baichuan", "vicuna", "olmo")


class MentionsExtractor:
    name: ClassVar[str] = "mentions"
    anchors: ClassVar[tuple[str, ...]] = (
        "NVIDIA", "RTX", "Tesla", "A100", "A800", "H100", "H200", "H800", "H20", "A10G", "L40",
        "V100", "GPUs", "gpus",
        "cards", "张", "A10", "a10", "a30", "a40", "a6000", "h100", "h200", "h800", "h20", "l40",
        "l4", "L4", "T4", "t4", "v100", "p100", "P40", "p40", "b200", "090", "080", "060",
        "llama", "mistral", "mixtral", "gemma", "deepseek", "phi-", "Phi",
        "lama", "LaMA", "Qwen", "qwen", "istral", "eepSeek", "eepseek", "emma", "gpt-oss", "Phi-",
        "LaVA", "lava", "ntern", "iniCPM", "inicpm", "aichuan", "ranite", "emotron", "tarCoder",
        "tarcoder", "icuna", "OLMo", "olmo", "utilization", "Utilization", "fraction",
        "卡", "块", "显存", "VRAM", "vram", "GB GPU", "G GPU", "GB card", "G card",
        "need", "Need", "NEED", "require", "Require", "must support", "must handle", "需要",
        "至少", "要求", "上下文")
    follow: ClassVar[int] = 0

    def __init__(self) -> None:
        self._memory_said: tuple[float, int] | None = None  # each card's GiB, and its line
        self._model_said: str | None = None  # the model fact, when these words set it

    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text
        if len(text) > _MAX_PROSE:
            return  # a log line, not a sentence someone wrote
        if sink.get("gpu_name") is None and (m := _GPU.search(text)) and _plausible_gpu(m):
            sink.set_default("gpu_name", m.group("name").strip(), line.no)
            # "4x A10", "A10*4" or "two A100 80GB GPUs"
            count = m.group("count") or m.group("after") or m.group("said")
            if count:
                sink.set_default("gpu_count", _NUMBER_WORDS.get(count) or int(count), line.no)
        if sink.get("gpu_name") is None and (m := _LOOSE_GPU.search(text)):
            sink.set_default("gpu_name", m.group("name").strip(), line.no)
            count = m.group("count")
            if count:
                n = _NUMBER_WORDS.get(count.lower()) or int(count)
                sink.set_default("gpu_count", n, line.no)
        if sink.get("gpu_count") is None and (c := _COUNT.search(text)):
            sink.set_default("gpu_count", int(c.group("count")), line.no)
        if sink.get("gpu_count") is None and (c := _CN_COUNT.search(text)):
            said = c.group("count")
            sink.set_default("gpu_count", _CN_NUMBERS.get(said) or int(said), line.no)
        if self._memory_said is None and (
                g := _MEMORY_SAID.search(text) or _MEMORY_SAID_AFTER.search(text)) and (
                8 <= int(g.group("gib")) <= 192):
            self._memory_said = (float(g.group("gib")), line.no)
        if (sink.get("gpu_memory_utilization") is None and sink.get("mem_fraction_static") is None
                and (u := _UTIL.search(text)) and is_prose(text)):
            # a person's statement of the setting; vLLM's own hints name values to try
            fact = "mem_fraction_static" if "fraction" in u.group("key").lower() else (
                "gpu_memory_utilization")
            sink.set_default(fact, float(u.group("value")), line.no)
        # is_prose first: most lines here are log records, and the pattern is costly to compile
        if (sink.get("needed_max_model_len") is None and is_prose(text)
                and (need := _NEED_SAID.search(text))
                and (length := _needed_length(need)) is not None):
            sink.set_default("needed_max_model_len", length, line.no)
        if sink.get("model_named") is None and (model := _model(text)):
            # "Qwen3.8-27B (NVFP4)": the format said right after the name
            q = _QUANT_AFTER.match(text, text.find(model) + len(model))
            fmt = q.group("q").lower() if q else None
            sink.set("model_named", f"{model}-{fmt}" if fmt else model, line.no)
            if sink.get("model") is None:
                sink.set_default("model", model, line.no)
                self._model_said = model
                if fmt and sink.get("quantization") is None:
                    sink.set_default("quantization", fmt, line.no)

    def fold(self) -> Fold:
        """Every reading here fills a fact only if unset: the first line each would act on."""
        return _FOLD

    def finish(self, sink: FactSink) -> None:
        """A card's memory said in words counts only where no line of the paste gave the
        GPU's total (an OOM line's capacity is set as a default too, and outranks it)."""
        if self._memory_said is not None and sink.get("gpu_total_gib") is None:
            sink.set_default("gpu_total_gib", *self._memory_said)
        model = sink.get("model")
        if model is not None and model in (self._model_said, sink.get("model_named")):
            sink.discard("model_named")  # the words are the model fact: nothing to add
        self._memory_said = self._model_said = None


def _needed_length(m: re.Match[str]) -> int | None:
    """The length a `_NEED_SAID` match names, in tokens; None when it is no plausible
    context length (under 512 tokens, over 10M)."""
    v = _LENGTH_VALUE.search(m.group(0))
    assert v is not None  # every alternative of _NEED_SAID holds a length
    n = int(v.group("n").replace(",", ""))
    if v.group("k"):
        n *= 1024 if n in _BINARY_K else 1000
    return n if 512 <= n <= 10 * 1024 * 1024 else None


def _short(match: re.Match[str]) -> bool:
    return len(match.string) <= _MAX_PROSE


def _plausible_gpu(m: re.Match[str]) -> bool:
    # A bare letter+digits counts when it is a well-known data-centre part, or stands next to a
    # GPU word, a memory size or a count; otherwise "L2" or "T5" are as likely anything else.
    name = m.group("name")
    if any(w in name for w in ("NVIDIA", "Nvidia", "GeForce", "Tesla", "RTX", "GTX", "GB")):
        return True
    if _KNOWN_PARTS.match(name) or m.group("count") is not None:
        return True
    return bool(_GPU_CONTEXT.match(m.string, m.end(), m.end() + 12))


def _model(text: str) -> str | None:
    for m in _REPO.finditer(text):
        repo = m.group("repo")
        if any(w in repo.lower() for w in _FAMILY_WORDS) and not repo.endswith(".py"):
            return repo
    for m in _FAMILY.finditer(text):
        sized = _SIZE.match(m.group("name"))
        if sized:
            return sized.group(1).strip(" -")
    return None


# The person's statement of a utilization (_UTIL) is read in prose only: not from a family's
# lines, which never are.
_PROBES = (
    Probe(_GPU, lambda m: _short(m) and _plausible_gpu(m), last=0),
    Probe(_LOOSE_GPU, _short, last=0),
    Probe(_COUNT, _short, last=0),
    Probe(_CN_COUNT, _short, last=0),
    Probe(_MEMORY_SAID, lambda m: _short(m) and 8 <= int(m.group("gib")) <= 192, last=0),
    *(Probe(p, lambda m: _short(m) and _model(m.string) is not None, last=0)
      for p in (_REPO, _FAMILY)),
)
_FOLD = Fold(gates=tuple((a, p) for a in MentionsExtractor.anchors for p in _PROBES))
