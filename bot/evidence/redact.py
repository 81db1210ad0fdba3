"""Removing secrets from text before it is posted, stored or logged.

Every pattern starts at a literal (a key prefix, a flag, `://`), has bounded repeats only, and
leaves the name of what it hid visible (`--api-key [REDACTED]`, `HF_TOKEN=[REDACTED]`), so a
reader still sees that a key was passed. The marker itself never matches a pattern, which makes
`redact` idempotent. Near misses matter as much as hits: `max_num_batched_tokens=8192`,
`tokens/s`, `eos_token='</s>'` and `sk-learn` paths are ordinary log text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from bot.lazyre import LazyPattern, lazy

MARK = "[REDACTED]"
_NOT_MARK = r"(?!\[REDACTED)"
# A value as written after `=` or `:`: quoted, a bracketed list (vLLM's api_key=['...']), or bare.
_VALUE = (r"""(?P<v1>"[^"\n]{1,512}")|(?P<v4>'[^'\n]{1,512}')|(?P<v2>\[[^\]\n]{1,512}\])|"""
          r"""(?P<v3>[^\s"',;)}\]]{1,512})""")


def _keep_key(m: re.Match[str]) -> str:
    """Replace only the value (with its quotes or brackets); keep the key and separator."""
    for name in ("v1", "v2", "v3", "v4"):
        if m.group(name) is not None:
            if m.group(name).strip("'\"").lower() in ("none", "null", ""):
                return m.group(0)
            start, end = m.span(name)
            base = m.start(0)
            whole = m.group(0)
            return whole[: start - base] + MARK + whole[end - base :]
    return m.group(0)


def _whole(m: re.Match[str]) -> str:
    return MARK


def _secret_part(m: re.Match[str]) -> str:
    start, end = m.span("secret")
    whole = m.group(0)
    return whole[: start - m.start(0)] + MARK + whole[end - m.start(0) :]


def _openai(m: re.Match[str]) -> str:
    # Keys mix cases and digits; paths and package names ("sk-learn-...") do not.
    body = m.group(0)[3:]
    if any(c.isupper() for c in body) and any(c.islower() for c in body) and \
            any(c.isdigit() for c in body):
        return MARK
    return m.group(0)


_RULES: tuple[tuple[tuple[str, ...], LazyPattern, Callable[[re.Match[str]], str]], ...] = (
    (("PRIVATE KEY",), lazy(
        r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----(?:[\s\S]{0,16384}?-----END [A-Z ]{0,40}"
        r"PRIVATE KEY-----|[A-Za-z0-9+/=\s]{0,16384})"), lambda m: MARK + " (private key)"),
    (("://",), lazy(rf"://[^\s:/@]{{1,256}}:{_NOT_MARK}(?P<secret>[^\s@/]{{1,256}})@"),
     _secret_part),
    (("hf_",), lazy(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,128}(?![A-Za-z0-9])"), _whole),
    (("sk-",), lazy(r"(?<![\w-])sk-[A-Za-z0-9_-]{32,256}"), _openai),
    (("xox",), lazy(r"(?<![\w-])xox[abposr]-[A-Za-z0-9-]{10,256}"), _whole),
    (("xapp-",), lazy(r"(?<![\w-])xapp-[A-Za-z0-9-]{10,256}"), _whole),
    (("AKIA",), lazy(r"(?<![A-Z0-9])AKIA[A-Z0-9]{16}(?![A-Z0-9])"), _whole),
    (("ASIA",), lazy(r"(?<![A-Z0-9])ASIA[A-Z0-9]{16}(?![A-Z0-9])"), _whole),
    # --api-key X, --api-key=X, --hf-token X, --password X (not --max-num-batched-tokens), and
    # the argv-list form docker inspect prints: "--api-key", "X"
    (("--",), lazy(
        rf"--[\w-]{{0,40}}(?:api[-_]?key|token|secret|password|passwd)(?![\w-])"
        rf"(?:\s{{1,8}}|=|[\"']\s{{0,3}},\s{{0,3}}){_NOT_MARK}(?:{_VALUE})"), _keep_key),
    # Authorization headers and bearer tokens
    (("earer",), lazy(rf"(?:Bearer|bearer|BEARER)\s{{1,8}}{_NOT_MARK}"
                         r"(?P<secret>[A-Za-z0-9._~+/=-]{8,4096})"), _secret_part),
    (("uthorization",), lazy(
        rf"(?:Authorization|authorization|AUTHORIZATION)\s{{0,3}}[:=]\s{{0,3}}"
        rf"(?:Basic|Token|token)\s{{1,8}}{_NOT_MARK}(?P<secret>[A-Za-z0-9._~+/=-]{{8,4096}})"),
     _secret_part),
    # SOME_TOKEN=..., X_API_KEY=..., AWS_SECRET_ACCESS_KEY=..., DB_PASSWORD=...
    (("_",), lazy(
        rf"(?:_TOKEN|_KEY|_SECRET|PASSWORD|_PASSWD)[\"']?\s{{0,3}}(?:=|:\s)\s{{0,3}}{_NOT_MARK}"
        rf"(?:{_VALUE})"), _keep_key),
    # api_key='...', 'api_key': '...', hf_token=..., aws_secret_access_key = ..., password: ...
    (("key", "KEY", "token", "secret", "password", "passwd"), lazy(
        rf"(?<![\w-])(?:(?:[a-z0-9]{{1,20}}_)?(?:api_?key|apikey|access_token|auth_token|"
        rf"secret_access_key|secret_key|client_secret|secret|password|passwd)|hf_token|token)"
        rf"[\"']?\s{{0,3}}(?:=|:)\s{{0,3}}"
        rf"{_NOT_MARK}(?:{_VALUE})"), _keep_key),
)


def redact(text: str) -> str:
    """`text` with every secret replaced by MARK. Idempotent; linear in len(text)."""
    for keywords, pattern, replace in _RULES:
        if any(k in text for k in keywords):
            text = pattern.sub(replace, text)
    return text
