"""The incident fingerprint: which diagnoses are "the same incident again".

Two pastes of one failure differ in timestamps, PIDs, request ids, container ids, temp paths and
the exact byte counts; grouping must look through all of that, or every paste is a new incident
and "seen 5 times since Monday" never appears. So the signature line is masked before hashing,
and the inputs (problem, masked line, host, model) travel with the digest (`Fingerprint`): the
store keeps them so a group can explain why its events were grouped.

Standard library only: the diagnose core calls this on the `inferbot diagnose` start-up path.
Every pattern is linear (no nested quantifiers) and the line is bounded first, so hostile input
cannot make hashing slow.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from bot.lazyre import lazy
from bot.structs import struct

# Enough to carry any real error line; the rest is noise for grouping and bounds regex time.
MAX_SIGNATURE_CHARS = 1000

_UUID = lazy(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_TIMESTAMPS = (
    # ISO 8601 / RFC 3339 date-times and plain dates: 2026-11-30T06:03:16.123+00:00
    lazy(
        r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?"
        r"(?:Z|[+-]\d{2}:?\d{2})?)?\b"
    ),
    # vLLM's "INFO 11-30 06:03:16" and syslog's "Nov 30 06:03:16"
    lazy(r"\b\d{2}-\d{2} \d{1,2}:\d{2}:\d{2}(?:[.,]\d{1,9})?\b"),
    lazy(
        r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) {1,2}\d{1,2} \d{1,2}:\d{2}:\d{2}\b"
    ),
    # a bare clock time: 06:03:16.123
    lazy(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d{1,9})?\b"),
)
# Absolute, home and relative paths; not "org/model" ids (no leading slash) nor "8/8" counters.
_PATH = lazy(r"(?<![\w.~/])(?:~|\.{1,2})?/[\w.@+=,-]*(?:/[\w.@+=,-]*)*")
_PID = lazy(r"\b((?i:pid|process|thread|tid))([=: #]{1,3})\d+")
_HEX_PREFIXED = lazy(r"\b0[xX][0-9a-fA-F]+\b")
_HEX_RUN = lazy(r"\b[0-9a-fA-F]{8,}\b")
_NUMBER = lazy(r"\d+(?:\.\d+)?")
_SPACE = lazy(r"\s+")


def _hex_or_keep(m: re.Match[str]) -> str:
    """A run of 8+ hex digits is an id (container, commit, address) only if it mixes letters and
    digits; a plain word like "deadbeef" or a plain number is left to the other rules."""
    s = m.group(0)
    has_digit = any(c.isdigit() for c in s)
    has_alpha = any(c.isalpha() for c in s)
    return "<hex>" if has_digit and has_alpha else s


def mask_line(line: str) -> str:
    """The line with everything that varies between two occurrences of one failure masked.

    Order matters: UUIDs and timestamps before numbers (their digits would be masked piecemeal),
    paths before numbers (a path's digits are part of the path).
    """
    s = line[:MAX_SIGNATURE_CHARS]
    s = _UUID.sub("<uuid>", s)
    for pattern in _TIMESTAMPS:
        s = pattern.sub("<ts>", s)
    s = _PATH.sub("<path>", s)
    s = _PID.sub(r"\1\2<pid>", s)
    s = _HEX_PREFIXED.sub("<hex>", s)
    s = _HEX_RUN.sub(_hex_or_keep, s)
    s = _NUMBER.sub("<n>", s)
    return _SPACE.sub(" ", s).strip()


@struct(frozen=True, slots=True)
class Fingerprint:
    """Which incident a diagnosis is: the digest, and the normalised inputs it was taken from
    (the top problem, its masked signature line, the host and the model, case-folded, "" where
    unknown). Computed once, by the core; the store keeps the inputs so a group can explain
    why its events were grouped. In JSON it is the digest alone."""

    digest: str
    problem: str
    signature: str
    host: str
    model: str

    def json_value(self) -> str:
        return self.digest

    def parts(self) -> dict[str, str]:
        return {"problem": self.problem, "signature": self.signature, "host": self.host,
                "model": self.model}

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """To pydantic (JSON Schema, validation) a fingerprint is its digest, a string."""
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(
            lambda digest: digest if isinstance(digest, cls) else cls(digest, "", "", "", ""),
            core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda f: f.digest if isinstance(f, cls) else f))


def fingerprint(
    problem_id: str | None, signature_line: str | None, host: str | None, model: str | None
) -> Fingerprint:
    """A deterministic digest of the normalised inputs, with those inputs. Host and model are
    case-folded (hostnames and Hugging Face ids are case-insensitive in practice). The digest
    is 32 hex characters (128 bits of SHA-256): collisions are not a concern.
    """
    problem = (problem_id or "").strip()
    signature = mask_line(signature_line or "")
    host_ = (host or "").strip().lower()
    model_ = (model or "").strip().lower()
    payload = "\x1f".join((problem, signature, host_, model_))
    digest = hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]
    return Fingerprint(digest, problem, signature, host_, model_)


def signature_line(evidence: Sequence[str]) -> str:
    """The line an incident's fingerprint is taken from: the top problem's latest evidence line,
    where the process failed."""
    return evidence[-1] if evidence else ""
