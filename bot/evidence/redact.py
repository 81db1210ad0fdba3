"""What may leave inferbot: text without secrets and without terminal control characters.

`redact` is the one function every outward path calls (the core's quoted lines and excerpt,
collected host output, stored notes, one-line errors, every log record), so a reply, `--json`,
a database row, a spool file, a log line and `check` output all hide the same secrets.

Control characters go first (`strip_controls`): C0 except tab and newline, DEL, C1, and every
escape sequence form (CSI, OSC, DCS/SOS/PM/APC strings, charset switches and the other two- and
three-byte ESC forms), so pasted or collected text cannot recolour, retitle or reset a
terminal, nor hide a key behind an escape. The text between them is kept.

Secret patterns follow what gitleaks and trufflehog look for in these ecosystems (Slack,
GitHub, GitLab, Hugging Face, OpenAI and Anthropic keys, AWS key pairs, GCP service-account
JSON, Azure connection strings, JWTs, PEM private keys, passwords in URLs, key and token
flags). Every pattern starts at a literal (a key prefix, a flag, `://`), has bounded repeats
only, and leaves the name of what it hid visible (`--api-key [REDACTED]`, `HF_TOKEN=[REDACTED]`),
so a reader still sees that a key was passed. The marker itself never matches a pattern, which
makes `redact` idempotent. Near misses matter as much as hits: `max_num_batched_tokens=8192`,
`tokens/s`, `eos_token='</s>'`, `sk-learn` paths and 40-hex git hashes are ordinary log text.
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
    # Project, service-account and Anthropic keys say what they are; an old-style key mixes
    # cases and digits, which paths and package names ("sk-learn-...") do not.
    body = m.group(0)[3:]
    if body.startswith(("proj-", "svcacct-", "admin-", "ant-")) or (
            any(c.isupper() for c in body) and any(c.islower() for c in body)
            and any(c.isdigit() for c in body)):
        return MARK
    return m.group(0)


_AWS_ID = lazy(r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])")
# An AWS secret access key is 40 characters of base64; an unlabeled one is recognised by the
# access key id beside it (the way `aws configure list`, CSV exports and pastes show a pair).
_AWS_SECRET = lazy(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_AWS_NEAR = 200
_AWS_KEYWORDS = ("AKIA", "ASIA", "ABIA", "ACCA", "A3T")


def _is_aws_secret(token: str) -> bool:
    # mixed case and a digit or symbol: a git hash (lowercase hex) or a word run is not a key
    return (any(c.isupper() for c in token) and any(c.islower() for c in token)
            and any(c.isdigit() or c in "/+" for c in token))


def _aws_pairs(text: str) -> str:
    """Key ids, and any 40-character secret within _AWS_NEAR characters of one."""
    spans = [m.span() for m in _AWS_ID.compiled.finditer(text)]
    if not spans:
        return text
    hide: list[tuple[int, int]] = list(spans)
    for start, end in spans:
        lo, hi = max(0, start - _AWS_NEAR), min(len(text), end + _AWS_NEAR)
        hide += [(lo + m.start(), lo + m.end())
                 for m in _AWS_SECRET.compiled.finditer(text[lo:hi]) if _is_aws_secret(m.group(0))]
    out, at = [], 0
    for start, end in sorted(set(hide)):
        if start >= at:
            out += [text[at:start], MARK]
            at = end
    return "".join([*out, text[at:]])


_RULES: tuple[tuple[tuple[str, ...], LazyPattern, Callable[[re.Match[str]], str]], ...] = (
    # PEM blocks, also as a JSON string with escaped newlines (a GCP service-account key file's
    # "private_key"), and cut pastes that lost their END line
    (("PRIVATE KEY",), lazy(
        r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]{0,16384}?-----END "
        r"[A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s\\]{0,16384})"),
     lambda m: MARK + " (private key)"),
    # scheme://user:password@host (the user may be empty: redis://:pw@h); the password runs to
    # the last @ before the host, so one with an @ in it is hidden whole
    (("://",), lazy(rf"://[^\s:/@]{{0,256}}:{_NOT_MARK}(?P<secret>[^\s/]{{1,256}}?)@"
                    r"(?![^\s/@]{0,256}@)"), _secret_part),
    (("hf_",), lazy(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,128}(?![A-Za-z0-9])"), _whole),
    (("api_org_",), lazy(r"(?<![A-Za-z0-9])api_org_[A-Za-z0-9]{30,128}(?![A-Za-z0-9])"), _whole),
    (("sk-",), lazy(r"(?<![\w-])sk-[A-Za-z0-9_-]{32,256}"), _openai),
    # Slack: bot, user, workspace, legacy, refresh, client (browser session) and configuration
    # tokens, app-level tokens and incoming webhooks
    (("xox",), lazy(r"(?<![\w-])(?:xoxe\.)?xox[abcdeoprs]-[A-Za-z0-9-]{8,256}"), _whole),
    (("xapp-",), lazy(r"(?<![\w-])xapp-[A-Za-z0-9-]{10,256}"), _whole),
    (("hooks.slack.com",), lazy(r"hooks\.slack\.com/(?:services|workflows|triggers)/"
                                r"[A-Za-z0-9/_+-]{20,256}"), lambda m: "hooks.slack.com/" + MARK),
    # GitHub personal, OAuth, user-to-server, server-to-server and refresh tokens; fine-grained
    # personal tokens
    (("gh",), lazy(r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{36,251}(?![A-Za-z0-9])"), _whole),
    (("github_pat_",), lazy(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{22,255}"), _whole),
    # GitLab personal, deploy, runner, pipeline-trigger, feed, OAuth and agent tokens; runner
    # registration tokens
    (("gl",), lazy(r"(?<![\w-])gl(?:pat|dt|rt|ptt|ft|oas|soat|cbt|imt|agent)-"
                   r"[A-Za-z0-9_-]{20,256}"), _whole),
    (("GR1348941",), lazy(r"GR1348941[A-Za-z0-9_-]{20,64}"), _whole),
    # JSON Web Tokens (header.payload.signature, each base64url; both JSON parts start `{"`)
    (("eyJ",), lazy(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,4096}\.eyJ[A-Za-z0-9_-]{4,8192}"
                    r"\.[A-Za-z0-9_-]{0,4096}"), _whole),
    # Azure: storage, Service Bus and Event Hubs connection strings, SAS signatures, and AD
    # client secrets (three characters, a digit, "Q~")
    (("AccountKey", "SharedAccess", "sig="), lazy(
        rf"(?:AccountKey|SharedAccessKey|SharedAccessSignature|[?&;]sig)\s{{0,3}}="
        rf"{_NOT_MARK}(?P<secret>[^\s;&\"'<>]{{8,1024}})"), _secret_part),
    (("Q~",), lazy(r"(?<![A-Za-z0-9_~.])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}"
                   r"(?![A-Za-z0-9_~.-])"), _whole),
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
    # api_key='...', 'api_key': '...', hf_token=..., aws_secret_access_key = ..., password: ...,
    # a service-account file's "private_key_id": "..."
    (("key", "KEY", "token", "secret", "password", "passwd"), lazy(
        rf"(?<![\w-])(?:(?:[a-z0-9]{{1,20}}_)?(?:api_?key|apikey|access_token|auth_token|"
        rf"secret_access_key|secret_key|client_secret|private_key_id|private_key|secret|"
        rf"password|passwd)|hf_token|token)"
        rf"[\"']?\s{{0,3}}(?:=|:)\s{{0,3}}"
        rf"{_NOT_MARK}(?:{_VALUE})"), _keep_key),
)

# C0 controls except tab and newline, DEL, C1; escape sequences whole: CSI (ESC [ or 0x9B),
# string sequences OSC/DCS/SOS/PM/APC (ESC ] P X ^ _ or 0x9D 0x90 0x98 0x9E 0x9F) up to BEL or
# ST, and the other ESC forms (charset switches `ESC ( B`, `ESC # 8`, RIS `ESC c`, keypad
# modes). An unterminated sequence loses only its introducer.
_CONTROLS = lazy(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]{0,64}[\x20-\x2f]{0,16}[\x40-\x7e]"
    r"|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\x07\x1b\x9c]{0,4096}(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[\x20-\x2f]{0,4}[\x30-\x7e]"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_ANY_CONTROL = lazy(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strip_controls(text: str) -> str:
    """`text` without control characters or escape sequences (tab and newline kept)."""
    if _ANY_CONTROL.search(text) is None:
        return text
    return _CONTROLS.sub("", text)


def redact(text: str) -> str:
    """`text` without control characters and with every secret replaced by MARK.
    Idempotent; linear in len(text)."""
    text = strip_controls(text)
    if any(k in text for k in _AWS_KEYWORDS):
        text = _aws_pairs(text)
    for keywords, pattern, replace in _RULES:
        if any(k in text for k in keywords):
            text = pattern.sub(replace, text)
    return text
