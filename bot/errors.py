"""One line for any exception that reaches a person or a log.

The terminal, Slack and the logs all say errors through `one_line`, so the rules are the same
everywhere: the first line of the message, redacted (a database URL with its password, a
token in a driver's message), at most MAX_CHARS characters. A library's wrapper says less than
what it wraps (SQLAlchemy's `orig`, urllib's `reason`, Slack's API error code), so the inner
error is what is told. pydantic's validation errors print the offending input (a whole Slack
payload), so only their count and locations are given; invalid INFERBOT_* settings are named
by their variable.
"""

from __future__ import annotations

from typing import Any

from bot.evidence.redact import redact

MAX_CHARS = 300


def one_line(exc: BaseException, *, typed: bool = False, limit: int = MAX_CHARS) -> str:
    """The exception as one redacted line; `typed` puts its class name first (for logs)."""
    inner = _inner(exc)
    name = type(inner).__name__
    if _is_validation_error(inner):
        text = _validation(inner)
    elif (code := _api_error(inner)) is not None:
        text = code
    else:
        lines = str(inner).strip().splitlines()
        text = redact(lines[0]) if lines else ""
    text = text[:limit]
    if not text:
        return name
    return f"{name}: {text}" if typed else text


def _inner(exc: BaseException) -> BaseException:
    for attr in ("orig", "reason"):
        inner = getattr(exc, attr, None)
        if isinstance(inner, BaseException):
            return inner
    return exc


def _api_error(exc: BaseException) -> str | None:
    """A web API's error code (Slack's `invalid_auth`), which is all its message says."""
    response: Any = getattr(exc, "response", None)
    get = getattr(response, "get", None)
    if not callable(get):
        return None
    code = get("error")
    return str(code) if code else None


def _is_validation_error(exc: BaseException) -> bool:
    # checked by name so that the CLI's fast path does not import pydantic to say an error
    return type(exc).__name__ == "ValidationError" and hasattr(exc, "errors")


def _validation(exc: Any) -> str:
    if getattr(exc, "title", None) == "Settings":
        from bot.config import describe_errors

        return (f"invalid configuration: {'; '.join(describe_errors(exc))} "
                "(`inferbot doctor` checks it all)")
    where = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors()[:5])
    return f"{exc.error_count()} error(s) at {where or '-'}"
