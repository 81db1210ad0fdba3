"""Prometheus metrics of one `inferbot serve` process, served at GET /metrics in HTTP mode.

Written here, in the text exposition format (version 0.0.4), rather than with prometheus_client:
the bot exposes four counters and one histogram, each replica is scraped on its own (no
multiprocess mode, no push gateway), and the format is small and stable, so the dependency
would buy nothing but another package in the image. Every label value comes from a bounded set
(knowledge-base problem ids, Slack method names and error codes, parser verbs), never from chat
text, so the series count stays small.

Standard library only: bot.slack, bot.collect and bot.store import it without pulling anything.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_MAX_LABEL = 64


def _label(value: str) -> str:
    """A label value, bounded and escaped as the format requires (backslash, quote, newline)."""
    value = value[:_MAX_LABEL]
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_label(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf"
    return repr(int(value)) if value == int(value) else repr(value)


class Counter:
    """A monotonic count per combination of label values."""

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        self.name, self.help, self.label_names = name, help_text, tuple(labels)
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()
        REGISTRY.append(self)

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        key = tuple(labels)
        if len(key) != len(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {key}")
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, *labels: str) -> float:
        with self._lock:
            return self._values.get(tuple(labels), 0.0)

    def expose(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        with self._lock:
            items = sorted(self._values.items())
        if not items and not self.label_names:  # an unlabelled counter is 0, not absent
            items = [((), 0.0)]
        lines += [f"{self.name}{_labels(self.label_names, k)} {_number(v)}" for k, v in items]
        return lines


class Histogram:
    """Cumulative buckets, sum and count per combination of label values."""

    def __init__(self, name: str, help_text: str, buckets: Sequence[float],
                 labels: Sequence[str] = ()) -> None:
        self.name, self.help, self.label_names = name, help_text, tuple(labels)
        self.buckets = (*sorted(buckets), math.inf)
        self._series: dict[tuple[str, ...], list[float]] = {}  # bucket counts..., sum, count
        self._lock = threading.Lock()
        REGISTRY.append(self)

    def observe(self, value: float, *labels: str) -> None:
        key = tuple(labels)
        if len(key) != len(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {key}")
        with self._lock:
            series = self._series.setdefault(key, [0.0] * (len(self.buckets) + 2))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    series[i] += 1
            series[-2] += value
            series[-1] += 1

    def expose(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        with self._lock:
            items = sorted((k, list(v)) for k, v in self._series.items())
        for key, series in items:
            for bound, n in zip(self.buckets, series, strict=False):
                le = _labels(self.label_names, key, f'le="{_number(bound)}"')
                lines.append(f"{self.name}_bucket{le} {_number(n)}")
            tail = _labels(self.label_names, key)
            lines.append(f"{self.name}_sum{tail} {_number(series[-2])}")
            lines.append(f"{self.name}_count{tail} {_number(series[-1])}")
        return lines


REGISTRY: list[Counter | Histogram] = []


def exposition() -> str:
    """Every metric of this process, as Prometheus scrapes it."""
    return "\n".join(line for metric in REGISTRY for line in metric.expose()) + "\n"


DIAGNOSES = Counter(
    "inferbot_diagnoses_total",
    "Diagnoses answered in Slack, by the top problem id (none: nothing matched).",
    ("problem",))
REPLY_SECONDS = Histogram(
    "inferbot_reply_seconds",
    "From a message reaching this replica to its answer posted, by request verb.",
    (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0), ("verb",))
SSH_ERRORS = Counter(
    "inferbot_ssh_errors_total",
    "Hosts that could not be collected from (unreachable, host key, auth, timeout).")
SLACK_API_ERRORS = Counter(
    "inferbot_slack_api_errors_total",
    "Slack Web API calls that failed, by method and Slack error code (connection: no answer).",
    ("method", "error"))
FEEDBACK = Counter(
    "inferbot_feedback_total",
    "What people said of answers in Slack: wrong_diagnosis ('Not right?'), fix_failed, "
    "repeat (the same failure pasted again in its thread).",
    ("kind",))
DEDUP_HITS = Counter(
    "inferbot_dedup_hits_total",
    "Deliveries not answered because the message was already claimed: by this process "
    "(local) or by any replica (database).",
    ("where",))
