"""How figures and long text are written wherever inferbot shows them: one spelling of a GiB
figure and one way to shorten text, so the terminal, Slack and the store agree."""

from __future__ import annotations


def gib(value: float | None) -> str:
    """A memory figure as the answers write it ("9.97 GiB"); "?" when it is not known."""
    return "?" if value is None else f"{value:.2f} GiB"


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, an ellipsis marking the cut."""
    return text if len(text) <= width else text[: width - 1] + "…"
