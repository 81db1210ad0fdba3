"""Line families: the shapes a busy server repeats, declared once so the scanner can fold them.

Under load an inference server prints, for every request, the request, "Added request" and an
access line; every few seconds a metrics line; under KV pressure a warning per preempted
request. Each carries anchors, and reading each one by one costs the Python a diagnosis spends
on a line, hundreds of thousands of times, though few of them can change the answer. A family
names one such shape as a template: literal text and typed fields. Its lines are found with
one automaton pass and a bounded match per line; the literal text (the family's constant text)
tells every consumer, once, what each line of the family holds, and the consumer's fold says
which of the lines it must still read (bot.evidence.base.Fold).

Every template starts with a logger's prefix (vLLM's, uvicorn's, SGLang's), so a family's line
is never a person's sentence: prose rules (bot.evidence.paste.is_prose) never apply to it.
Fields match what the logger prints there and nothing wider; a line with more in it than the
template allows is not of the family and is read as any other line.
"""

from __future__ import annotations

import re
from functools import cached_property

from bot.structs import struct

# What each field may hold (bytes patterns). `tag` and `src` are the prefixes vLLM's logger
# and Ray's process tags put on a line, as bot.evidence.paste reads them.
FIELDS: dict[str, str] = {
    "tag": r"(?:\([A-Za-z_][\w.-]{0,60}(?:,? (?:rank|pid|ip|node|replica)=[\w.:/-]{1,60}){1,4}"
           r"\) )?",
    "time": r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?",
    "src": r"(?:\[[\w./-]{1,80}:\d{1,6}\]|[\w./-]{1,80}:\d{1,6}\])",
    # SGLang: "2026-05-24 03:51:44 TP0" (with its rank tag: without one, the prefix is a
    # transport's timestamp and the line reads as prose)
    "sgtime": r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?(?: [A-Z]{2}\d{1,5}){1,4}",
    "int": r"\d{1,12}",
    "num": r"-?\d{1,12}(?:\.\d{1,6})?",
    "id": r"[\w.:-]{1,160}",
    "addr": r"[\w.:\[\]-]{1,64}",
    "path": r"[\w./-]{1,200}",
    "word": r"\w{1,40}",
    "text": r".{0,16384}",
}
_FIELD = re.compile(r"\{(\w+)\}")


@struct(frozen=True)
class Family:
    """A line shape: literal text with `{field}` slots (FIELDS), real lines it matches and
    lines it must not."""

    name: str
    template: str
    examples: tuple[str, ...] = ()
    near_misses: tuple[str, ...] = ()

    @cached_property
    def _parts(self) -> tuple[list[str], list[str]]:
        parts = _FIELD.split(self.template)
        return parts[0::2], parts[1::2]

    @cached_property
    def regex(self) -> re.Pattern[bytes]:
        """The whole line (bytes, as the scanner reads it); compiled on first use."""
        return re.compile(self._pattern(self._parts[1]).encode())

    @cached_property
    def head(self) -> re.Pattern[bytes]:
        """What must match at the start of a line of the family: the whole line, but a
        trailing free text (which is anything up to the line's end) is left unread."""
        kinds = self._parts[1]
        if kinds and kinds[-1] == "text" and not self._parts[0][-1]:
            return re.compile(self._pattern(kinds[:-1]).encode())
        return re.compile(self._pattern(kinds).encode() + rb"\Z")

    def _pattern(self, kinds: list[str]) -> str:
        literals = self._parts[0][:len(kinds) + 1]
        fields = [FIELDS[k] for k in kinds] + [""]
        return "".join(re.escape(lit) + f for lit, f in zip(literals, fields, strict=True))

    @property
    def constant(self) -> str:
        """The text every line of the family holds, fields read as NUL (which no anchor holds):
        a literal found in it is in every line of the family."""
        return "\0".join(self._parts[0])

    @property
    def key(self) -> str:
        """The literal the scanner finds the family's lines by: its longest."""
        return max(self._parts[0], key=len)

    def matches(self, line: bytes) -> bool:
        return self.regex.fullmatch(line) is not None


_PREEMPTED = ("is preempted by PreemptionMode.{word} mode because there is not enough KV cache "
              "space. This can affect the end-to-end performance. Increase "
              "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
              "total_num_cumulative_preemption={int}")

FAMILIES: tuple[Family, ...] = (
    # "Engine 000:" marks V1 for the vLLM extractor: written out, it is in every line
    Family(
        "vllm-metrics",
        "{tag}INFO {time} {src} Engine 000: Avg prompt throughput: {num} tokens/s, Avg "
        "generation throughput: {num} tokens/s, Running: {int} reqs, Waiting: {int} reqs, GPU KV "
        "cache usage: {num}%, Prefix cache hit rate: {num}%{text}",
        examples=(
            "INFO 08-06 09:37:16 [loggers.py:118] Engine 000: Avg prompt throughput: 6992.7 "
            "tokens/s, Avg generation throughput: 186.3 tokens/s, Running: 50 reqs, Waiting: 0 "
            "reqs, GPU KV cache usage: 21.9%, Prefix cache hit rate: 89.7%",
            "(APIServer pid=3646) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt "
            "throughput: 0.0 tokens/s, Avg generation throughput: 1055.3 tokens/s, Running: 18 "
            "reqs, Waiting: 43 reqs, GPU KV cache usage: 95.9%, Prefix cache hit rate: 0.0%"),
        near_misses=(
            # a person quoting it
            "we see Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
            "1055.3 tokens/s, Running: 18 reqs, Waiting: 43 reqs, GPU KV cache usage: 95.9%, "
            "Prefix cache hit rate: 0.0%",
            # cut by a terminal
            "INFO 08-06 09:37:16 [loggers.py:118] Engine 000: Avg prompt throughput: 6992.7 "
            "tokens/s, Avg generation throughput: 186.3 tokens/s, Running: 50 reqs, Wai")),
    Family(
        "vllm-metrics-dp",
        "{tag}INFO {time} {src} Engine {int}: Avg prompt throughput: {num} tokens/s, Avg "
        "generation throughput: {num} tokens/s, Running: {int} reqs, Waiting: {int} reqs, GPU KV "
        "cache usage: {num}%, Prefix cache hit rate: {num}%{text}",
        examples=(
            "(APIServer pid=3646) INFO 05-19 10:13:11 [loggers.py:271] Engine 001: Avg prompt "
            "throughput: 0.0 tokens/s, Avg generation throughput: 1055.3 tokens/s, Running: 18 "
            "reqs, Waiting: 43 reqs, GPU KV cache usage: 95.9%, Prefix cache hit rate: 0.0%",)),
    Family(
        "vllm-v0-metrics",
        "{tag}INFO {time} {src} Avg prompt throughput: {num} tokens/s, Avg generation "
        "throughput: {num} tokens/s, Running: {int} reqs, Swapped: {int} reqs, Pending: {int} "
        "reqs, GPU KV cache usage: {num}%, CPU KV cache usage: {num}%{text}",
        examples=(
            "INFO 10-28 11:16:34 metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg "
            "generation throughput: 7220.5 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: "
            "98 reqs, GPU KV cache usage: 73.8%, CPU KV cache usage: 0.0%.",),
        near_misses=(
            "metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
            "7220.5 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 98 reqs, GPU KV cache "
            "usage: 73.8%, CPU KV cache usage: 0.0%.",)),
    Family(
        "vllm-request",
        "{tag}INFO {time} {src} Received request {id}: {text}",
        examples=(
            "INFO 05-22 02:20:59 async_llm_engine.py:524] Received request "
            "10390bd4d2dc4936bd1a62e5793a4fd8: prompt: '<bos><start_of_turn>user\\nplease tell me "
            "something about python<end_of_turn>\\n', sampling_params: SamplingParams(n=1, "
            "best_of=1, temperature=0.8, top_p=0.8, top_k=1, max_tokens=512), "
            "prompt_token_ids: [2, 106, 1645], lora_request: None.",),
        near_misses=("Received request 10390bd4: prompt: 'hi'",)),
    Family(
        "vllm-request-added",
        "{tag}INFO {time} {src} Added request {id}.",
        examples=(
            "INFO 08-06 09:37:10 [async_llm.py:270] Added request "
            "chatcmpl-17cf34710b974455afe74c4678c79320.",
            "INFO 02-10 18:06:30 engine.py:275] Added request "
            "cmpl-30aaf466904d4d148c2e17a584f448e0-0."),
        near_misses=("INFO 08-06 09:37:10 [async_llm.py:270] Added request chatcmpl-17cf34 to "
                     "the queue of engine 1.",)),
    Family(
        "vllm-request-aborted",
        "{tag}INFO {time} {src} Aborted request {id}.",
        examples=("INFO 08-06 09:38:10 [async_llm.py:416] Aborted request "
                  "chatcmpl-17cf34710b974455afe74c4678c79320.",)),
    Family(
        "uvicorn-access",
        '{tag}INFO:     {addr} - "POST /v1/{path} HTTP/1.1" {int} {text}',
        examples=(
            'INFO:     127.0.0.1:57634 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
            '(APIServer pid=3646) INFO:     2.36.8.92:56164 - "POST /v1/completions HTTP/1.1" '
            '500 Internal Server Error'),
        near_misses=('[2025-04-15 17:25:21] INFO:     10.100.100.12:54572 - "POST '
                     '/v1/chat/completions HTTP/1.1" 200 OK',)),
    Family(
        "vllm-engine-loop",
        "{tag}DEBUG {time} {src} EngineCore {text}",
        examples=("(EngineCore_DP0 pid=3771) DEBUG 11-18 18:05:02 [core.py:745] EngineCore "
                  "loop active.",
                  "DEBUG 11-18 18:05:03 [core.py:739] EngineCore waiting for work.")),
    Family(
        "vllm-v0-preempted",
        "{tag}WARNING {time} {src} Sequence group {id} " + _PREEMPTED,
        examples=(
            "WARNING 04-14 20:04:53 scheduler.py:1484] Sequence group 63 is preempted by "
            "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can "
            "affect the end-to-end performance. Increase gpu_memory_utilization or "
            "tensor_parallel_size to provide more KV cache memory. "
            "total_num_cumulative_preemption=1",),
        near_misses=(
            # Ray folds repeats into one line: a count the template does not hold
            "WARNING 04-14 20:06:19 scheduler.py:1484] Sequence group 63 is preempted by "
            "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can "
            "affect the end-to-end performance. Increase gpu_memory_utilization or "
            "tensor_parallel_size to provide more KV cache memory. "
            "total_num_cumulative_preemption=1 [repeated 2x across cluster]",)),
    Family(
        "sglang-decode",
        "[{sgtime}] Decode batch. #running-req: {int}, {text}",
        examples=("[2025-04-15 17:25:16 DP0 TP0] Decode batch. #running-req: 92, #token: 264288, "
                  "token usage: 0.92, gen throughput (token/s): 324.86, #queue-req: 990, ",),
        near_misses=(
            "[TP0] Decode batch. #running-req: 36, #token: 958017, token usage: 0.96",
            # a transport's timestamp, not SGLang's prefix: the rest reads as a sentence
            "[2025-04-15 17:25:16] Decode batch. #running-req: 92, #token: 264288")),
    Family(
        "sglang-decode-v2",
        "[{sgtime}] Decode batch, #running-req: {int}, {text}",
        examples=("[2025-12-12 08:43:59 TP0] Decode batch, #running-req: 6, #token: 1920, token "
                  "usage: 0.94, cuda graph: True, gen throughput (token/s): 446.45, "
                  "#queue-req: 5,",)),
    Family(
        "sglang-prefill",
        "[{sgtime}] Prefill batch. #new-seq: {int}, {text}",
        examples=("[2025-01-27 11:13:24 TP0] Prefill batch. #new-seq: 2, #new-token: 791, "
                  "#cached-token: 180, cache hit rate: 11.56%, token usage: 0.02, #running-req: "
                  "28, #queue-req: 0",)),
)
