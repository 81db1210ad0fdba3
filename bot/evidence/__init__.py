"""Text -> Facts: one extractor per source of evidence, run in one pass of the scanner.

The order of EXTRACTORS is the order their `finish` runs in: sources first, the lowest-priority
prose mentions after them, and the derived facts last, once everything has been read.
"""

from __future__ import annotations

from bot.evidence.base import Extractor, FactSink
from bot.evidence.derived import DerivedFacts
from bot.evidence.flags import FlagsExtractor
from bot.evidence.lmdeploy import LmdeployExtractor
from bot.evidence.mentions import MentionsExtractor
from bot.evidence.nvidia_smi import NvidiaSmiExtractor
from bot.evidence.redact import redact
from bot.evidence.scan import Scanner
from bot.evidence.sglang import SglangExtractor
from bot.evidence.tenants import TenantsExtractor
from bot.evidence.tgi import TgiExtractor
from bot.evidence.torch import TorchExtractor
from bot.evidence.vllm import VllmExtractor
from bot.schema import Facts

EXTRACTORS: tuple[type[Extractor], ...] = (
    VllmExtractor, SglangExtractor, TgiExtractor, LmdeployExtractor, FlagsExtractor,
    TorchExtractor,
    NvidiaSmiExtractor, TenantsExtractor, MentionsExtractor, DerivedFacts,
)

__all__ = ["EXTRACTORS", "extract_facts", "new_extractors", "redact"]


def new_extractors() -> list[Extractor]:
    """Fresh instances: extractors keep per-scan state (tables, open calls)."""
    return [cls() for cls in EXTRACTORS]


def extract_facts(text: str | bytes) -> Facts:
    sink = FactSink()
    Scanner(new_extractors()).scan(text, sink)
    return sink.build()
