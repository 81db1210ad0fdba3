"""A paste as an attacker or a careless user writes it: a real vLLM error line carrying one
canary secret of every family (tests/canaries.py) and every form of terminal control sequence.
The path tests send it through each way out and check what comes back."""

from __future__ import annotations

import re

from tests.canaries import CANARIES

ERROR_LINE = (
    "ERROR 11-30 06:03:16 [core.py:586] ValueError: To serve at least one request with the "
    "model's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the "
    "available KV cache memory (9.97 GiB). Based on the available memory, the estimated maximum "
    "model length is 77824. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine.")
# colour, charset switch (ESC ( 0 draws boxes), backspace, BEL, a DCS string, NUL, the 8-bit
# C1 CSI, full reset (RIS), a window-title OSC, shift-out, DEL
CONTROLS = ("\x1b[31m\x1b(0\x08\x07\x1bP1;2q#0\x1b\\\x00\x9b31m\x1bc\x1b]0;owned\x07\x0e\x7f"
            "\x1b#8\x1b[2J")
HOSTILE_LINE = (ERROR_LINE + " " + CONTROLS
                + " ".join(text.replace("\n", " ") for text, _ in CANARIES.values()))
PASTE = ("INFO 11-30 06:03:16 [gpu_worker.py:227] Available KV cache memory: 9.97 GiB\n"
         + HOSTILE_LINE + "\n")

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]|\\u00[01][0-9a-fA-F]|\\u007[fF]"
                      r"|\\u00[89][0-9a-fA-F]|\\[xX][01][0-9a-fA-F]|\\[eE]\[")


def controls(text: str) -> list[str]:
    """Control characters in `text`, raw or as a JSON or Python escape."""
    return _CONTROL.findall(text)
