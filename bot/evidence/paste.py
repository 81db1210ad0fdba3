"""Pastes as people paste them: one logical line per message, whatever the transport did.

A message reaches inferbot cut and decorated: a terminal or Slack hard-wraps it mid-word at a
fixed width, an editor re-flows it at spaces, Ray, vLLM's multiprocess workers and docker
compose put their prefix on every fragment (`(EngineCore_DP0 pid=1) ERROR 11-30 10:00:01
[core.py:700] `, `vllm-1  | `), CI viewers and kubectl add timestamps (`[2026-08-30T12:56:32Z]
`, `  | `), Markdown quotes add `> `, and Python 3.11 adds `^^^^` marker lines. Signatures and
extractors read one line at a time, so a message split over lines would otherwise be missed or
read with half its numbers.

`unwrap` rebuilds logical lines: transport decorations (quotes, CI pipes, timestamps, compose
service names) are dropped from every line; a log prefix is kept on a message's first fragment
and dropped from the fragments that continue it. A line continues the one before when the
paste is wrapped at a width (the previous line reaches it) or re-flowed (the previous line
stops mid-sentence and this one does not start a new record), and both carry the same prefix.
The result keeps, for every logical line, the number of the raw line it began on, so evidence
still points at the paste the user sent.

Everything here is bounded and linear: prefixes are matched with bounded patterns at the start
of a line only, and a logical line never grows past MAX_LINE_CHARS.
"""

from __future__ import annotations

from typing import NamedTuple

from bot.evidence.base import FactSink, Line
from bot.evidence.text import MAX_LINE_CHARS, normalize_line
from bot.lazyre import lazy

# Pastes up to this size are unwrapped; a larger input is a machine's log (`docker logs`,
# a log file), whose lines are whole, and is scanned as it is.
MAX_PASTE_BYTES = 4 * 1024 * 1024

# Decorations added by whatever carried the text: dropped from every line.
_TRANSPORT = lazy(
    r"(?:>{1,3}(?: |(?=\S)|$)"  # Markdown / e-mail quotes
    r"|\s{1,6}\|(?: |$)"  # CI log viewers ("  | "); a table row starts at the margin
    r"|\[\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?Z?\] "  # [2026-08-30T12:56:32Z]
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z? (?=\S)"  # kubectl / docker --timestamps
    r"|[A-Za-z][\w.-]{0,40}(?:[-_]\d{1,3}\s{1,16}|\s{2,16})\| )"  # compose: "vllm-1  | "
)
# Prefixes a logger puts on every line of a message: kept on its first line only.
_LOG = lazy(
    r"(?:\((?:[A-Za-z_][\w.-]{0,60}(?:,? (?:rank|pid|ip|node|replica)=[\w.:/-]{1,60}){1,4}"
    r"|raylet|gcs_server|autoscaler|dashboard|monitor)\) "  # Ray / vLLM process tags
    r"|\[rank\d{1,5}\]: ?"  # torchrun
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) {1,2}\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?"
    r" (?:\[[\w./-]{1,80}:\d{1,6}\]|[\w./-]{1,80}:\d{1,6}\]) "  # vLLM's logger
    r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?(?: [A-Z]{2}\d{1,5}){0,4}\] "  # SGLang
    r"|\[[EWIF]\d{4} \d\d:\d\d:\d\d\.\d{1,9} [\w.]{1,80}:\d{1,6}\] "  # glog (torch c10d)
    r"|[\w.-]{1,80}:\d{1,8}:\d{1,8} \[\d{1,3}\] "  # NCCL: host:pid:tid [dev]
    r"|\d{1,4}\.\d\d\.\d\d\d\.\d\d\d [DIWE] )"  # llama.cpp (llama-box): 3.02.042.178 I
)
_MAX_PREFIXES = 6
_CARETS = lazy(r"^\s{0,200}[\^~]{3,1000}\s{0,20}$")
# A line that begins a new record rather than continuing the previous message.
_RECORD = lazy(
    r"(?:Traceback \(most recent|\s{0,8}File \"|During handling|The above exception"
    r"|(?:[a-z_]\w{0,40}\.){0,6}[A-Z][\w.]{0,80}(?:Error|Exception|Warning|Interrupt|Exit|Failure)\b:?"
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b|\d{4}-\d\d-\d\d|\d\d-\d\d \d\d:"
    r"|[-*+] |\d{1,2}[.)] |#{1,6} |```|\$ |\||\+-|={3}|-{3}|NCCL |\[|\{|<)")
# A C function naming its record, as llama.cpp logs ("llama_context: ", "graph_reserve: "):
# a record of its own after another such record, or where lines are not cut at a width (a cut
# can fall before any word, "... Server error: | text_generation_client: ...").
_FUNCTION_RECORD = lazy(r"[a-z][a-z0-9]{0,30}_[a-z0-9_]{1,60}: ")
# A line that is whole on its own: a key and its value, a process's last word. Not a line with
# Chinese or Japanese in it: such prose has no spaces, so it would read as one long value.
_STANDALONE = lazy(r"\s{0,40}(?![\w.]{0,60}(?:Error|Exception|Warning):)"
                   r"(?![^\n]{0,400}[\u3040-\u9fff])"
                   r"[\w.-]{1,60}\s{0,4}[:=]\s{0,4}\S{1,80}\s{0,4}$"
                   r"|(?:Killed|Aborted|Terminated|Segmentation fault|Bus error)\b")
# A re-flowed line ends mid-sentence; these end a sentence, a value or a bracket.
_CLOSED = (".", ":", "!", "?", ";", ")", "]", "}", "\"", "'", "%", "。", "：", "！", "？", "）")
_MIN_WIDTH = 50
_MARKDOWN_LINK = lazy(r"!?\[[^\]\n]{0,200}\]\([^)\s]{1,400}\)")
_WORD = lazy(r"[A-Za-z][A-Za-z0-9_]{1,40}")
_TAIL_WORD = lazy(r"[A-Za-z0-9_]{1,60}$")
_HEAD_WORD = lazy(r"[A-Za-z0-9_]{1,60}")
_SUFFIXES = frozenset({"s", "es", "ed", "ing", "ion", "ions", "tion", "tions", "er", "ers", "ly",
                       "ment", "ness", "able", "ity"})
# Short words of English prose that a domain vocabulary may not hold.
COMMON_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "cannot", "could",
    "did", "do", "does", "for", "from", "had", "has", "have", "how", "i", "if", "in", "into",
    "is", "it", "its", "may", "more", "most", "my", "no", "not", "of", "on", "or", "our",
    "out", "so", "than", "that", "the", "then", "there", "these", "this", "to", "too", "up",
    "use", "used", "using", "was", "we", "were", "what", "when", "which", "while", "why",
    "will", "with", "would", "you", "your"})
# Words a number follows in the messages engines print.
NUMBER_LEADS = COMMON_WORDS | {"gpu", "rank", "process", "device", "len", "size", "blocks",
                               "tokens", "which", "capacity", "allocate", "total"}


class Unwrapped(NamedTuple):
    text: str
    origin: tuple[int, ...]  # origin[i]: the raw line (1-based) logical line i + 1 began on

    def raw_line(self, logical: int) -> int:
        """The raw line number of logical line `logical` (1-based); past the end, itself."""
        if 1 <= logical <= len(self.origin):
            return self.origin[logical - 1]
        return logical


class _Piece(NamedTuple):
    prefix: str  # the log prefix (transport decorations removed)
    body: str
    raw_len: int  # length of the line as pasted, decorations included


def split_prefix(line: str) -> tuple[str, str, str]:
    """(transport decorations, log prefix, body) of one line."""
    transport_end = 0
    log_start = log_end = -1
    pos = 0
    for _ in range(_MAX_PREFIXES):
        m = _TRANSPORT.match(line, pos)
        if m and m.end() > pos:
            if log_start == -1:
                transport_end = m.end()
            pos = m.end()
            continue
        m = _LOG.match(line, pos)
        if m and m.end() > pos:
            if log_start == -1:
                log_start = pos
            log_end = pos = m.end()
            continue
        break
    if log_start == -1:
        return line[:pos], "", line[pos:]
    return line[:transport_end], line[log_start:log_end], line[log_end:]


# What a program prints rather than what a person writes: a record header, a frame, a key
# followed by a value, code.
_PRINTED = lazy(
    r"(?:\s{0,8}(?:Traceback \(|File \"|at [\w$.]{1,200}\(|\^|~~)"
    r"|[A-Za-z_][\w.]{0,80}(?:Error|Exception|Warning)(?::|$)"
    # an exception behind the remains of a logger's prefix ("start.py:1395 (EngineCore
    # pid=1713) ValueError: ..."): tokens of code, not words, before it
    r"|(?:[^\s\d.:()\[\]=/]{0,40}[\d.:()\[\]=/]\S{0,80}\s{1,3}){1,4}"
    r"(?:[\w.]{0,60}\.)?[A-Z]\w{0,40}(?:Error|Exception):"
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b"
    r"|\d{4}[-/]\d\d[-/]\d\d|\d\d-\d\d \d\d:|\[\d|\(\w{1,60} pid=|\[rank|\s{4}"
    r"|[\w.-]{1,80}:\d{1,8}:\d{1,8} \[|NCCL |\||\+-|[{}<>$]|#(?!#{0,5} |\d))")
_PROGRESS = lazy(r"\d{1,3}%\s{0,3}(?:\||Completed)|\d{1,9}/\d{1,9} \[|(?:it|s)/(?:s|it)\]")
_LETTERS = lazy(r"[A-Za-z]{2,40}")
_CODE_CHARS = "()[]{}<>=/_\\"
CODE_SHARE = 0.12  # a line this dense in brackets, paths and assignments is code
_CJK = lazy(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]")
_SUBJECTS = frozenset({"it", "we", "this", "that", "they", "he", "she", "which", "vllm",
                       "sglang", "server", "everything"})
# A command line: a prompt or environment assignments, then a program, then options
# ("CUDA_VISIBLE_DEVICES=0,1 vllm serve /models/x --max-model-len 4096 --limit-mm-per-prompt").
_COMMAND = lazy(r"^\s{0,8}(?:[$#>]\s{1,4})?(?:[A-Z][A-Z0-9_]{1,40}=\S{0,200}\s{1,4}){0,8}"
                r"(?:sudo\s{1,4}|nohup\s{1,4}|exec\s{1,4})?"
                r"(?:vllm|python3?|docker|podman|lmdeploy|text-generation-launcher|sglang|"
                r"torchrun|accelerate|ray|kubectl|mistralrs-server|llama-server|\./\S{1,80})\s"
                r"(?=.{0,400}?(?:^|\s)--?[a-z][\w-]{1,60}.{0,400}?\s--?[a-z][\w-]{1,60})")


def names_engine(sink: FactSink, engine: str, line: Line) -> None:
    """Record the engine a line names: a log line or a command decides it, a sentence that
    names it ("vLLM works, lmdeploy does not") only when nothing else does."""
    if is_prose(line.text):
        sink.set_default("engine", engine, line.no)
    else:
        sink.set("engine", engine, line.no)


def is_prose(line: str) -> bool:
    """Whether a line reads as a person's words (a sentence, a question) rather than a log
    record, a traceback or code. Phrase signatures (`kind: prose`) read only such lines, so
    "throughput" in a metrics line is not someone saying it is slow."""
    _, prefix, body = split_prefix(line)
    stripped = body.strip()
    if prefix or not stripped or _PRINTED.match(body) or _PROGRESS.search(body):
        return False
    if len(stripped) > 2 and stripped[0] == stripped[-1] == "`":
        return False  # a message quoted whole as code is the program's words, not the user's
    if _COMMAND.match(stripped):
        return False  # a command with options, written down to show how the server ran
    head = body[:400]
    code = sum(head.count(c) for c in _CODE_CHARS)
    if code >= 8 and code >= CODE_SHARE * len(head.replace(" ", "")):
        # "Exception in callback _log_task_completion(error_callback=<bound method...>)":
        # brackets, paths and assignments, not a sentence
        return False
    words = _LETTERS.findall(head)
    # three words, or two led by a person's subject ("it OOMs:", "we crash"): a log record
    # of two words ("Worker exiting") has none
    return (len(words) >= 3 or _CJK.search(head) is not None
            or (len(words) == 2 and words[0].lower() in _SUBJECTS))


def words_of(text: str) -> set[str]:
    """The words of `text`, lower-cased: the vocabulary that tells a cut word from two."""
    return {w.lower() for w in _WORD.findall(text)}


def _inner_words(lines: list[str]) -> set[str]:
    """Words that stand inside a line of the paste: the first and last word of a line may be
    the halves of a word the wrap cut."""
    out: set[str] = set()
    for line in lines:
        found = _WORD.findall(line)
        out.update(w.lower() for w in found[1:-1])
    return out


def unwrap(text: str, vocabulary: frozenset[str] = frozenset()) -> Unwrapped:
    """Logical lines of a paste (see the module docstring). `vocabulary` (lower-case words,
    such as the KB's) helps tell a word cut in two from two words; the paste's own words and
    COMMON_WORDS are added to it."""
    pieces: list[_Piece] = []
    origin: list[int] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = normalize_line(raw)
        _, prefix, body = split_prefix(line)
        if body and _CARETS.match(body):
            continue
        # The width a terminal saw: colour codes take none, their remains copied without ESC
        # ("[36m") are text and take their length.
        width = len(line) if "\x1b" in raw or "\r" in raw else len(raw)
        pieces.append(_Piece(prefix, body, width))
        origin.append(no)
    widths = _widths(pieces)
    words = vocabulary | COMMON_WORDS | _inner_words([p.body for p in pieces])
    out: list[str] = []
    starts: list[int] = []
    prev: _Piece | None = None
    for piece, no in zip(pieces, origin, strict=True):
        joiner = _joiner(prev, piece, widths, words) if out else None
        if joiner is not None and len(out[-1]) + len(piece.body) < MAX_LINE_CHARS:
            if not joiner and out[-1][-1:].isspace() and piece.body[:1].isspace():
                # a logger that pads each fragment to its column and indents the next one
                # (Python's rich): the words were one space apart
                out[-1] = out[-1].rstrip() + " " + piece.body.lstrip()
            else:
                out[-1] += joiner + piece.body
        else:
            out.append(piece.prefix + piece.body)
            starts.append(no)
        prev = piece
    return Unwrapped("\n".join(out) + ("\n" if out else ""), tuple(starts))


class _Widths(NamedTuple):
    # Two or more different lines end exactly here: a hard-wrapped paste. Measured on the
    # lines as pasted (a terminal cut prefix and message together) and on the messages alone
    # (a logger put its prefix on each fragment it was handed); a paste may hold both.
    hard_raw: int | None
    hard_body: int | None
    longest: int  # the longest line, as pasted or without its prefix
    soft: int | None  # several lines end near the longest: a re-flowed paste

    def cut_at_width(self, piece: _Piece) -> bool:
        """Whether `piece` ends at a hard-wrap width (or one short, where a copy trimmed a
        space), as pasted or without its prefix: where a logger prefixed only some lines
        after the cut, either measure of a line may be the one that met the width."""
        return any(width is not None and width - 1 <= n <= width
                   for width in (self.hard_raw, self.hard_body)
                   for n in (piece.raw_len, len(piece.body)))


def _table_row(piece: _Piece) -> bool:
    """A row of a drawn table (nvidia-smi, a Markdown table) or a Markdown image or link on
    its own line: whole, and as wide as its neighbours by design (screenshots uploaded to one
    site share a URL length), so no evidence of a wrap width."""
    body = piece.body
    return ((body.startswith(("|", "+")) and body.endswith(("|", "+")) and len(body) > 1)
            or _MARKDOWN_LINK.fullmatch(body) is not None)


def _hard_width(pieces: list[_Piece], lengths: list[int]) -> int | None:
    lengths = [0 if _table_row(p) else n for p, n in zip(pieces, lengths, strict=True)]
    top = max(lengths, default=0)
    if top < _MIN_WIDTH:
        return None
    # Two different lines at the width (or one short of it), and most long lines there: a
    # re-flowed paste has long lines of many lengths.
    distinct = {(p.prefix, p.body) for p, n in zip(pieces, lengths, strict=True)
                if n >= top - 1}
    near = sum(1 for n in lengths if n >= 0.85 * top)
    return top if len(distinct) >= 2 and len(distinct) >= 0.5 * near else None


def _widths(pieces: list[_Piece]) -> _Widths:
    raw = [p.raw_len for p in pieces]
    body = [len(p.body) for p in pieces]
    longest = max(max(raw, default=0), max(body, default=0))
    near = sum(1 for p in pieces if max(p.raw_len, len(p.body)) >= 0.8 * longest)
    soft = longest if longest >= _MIN_WIDTH and near >= 2 else None
    return _Widths(_hard_width(pieces, raw), _hard_width(pieces, body), longest, soft)


def _inside_text(before: str, after: str) -> bool:
    """Whether a cut between these two lines can be inside a sentence: not after a run of
    spaces (padding), not before indentation, not between a sentence's end and a new one."""
    if before.endswith("  ") or after.startswith("  "):
        return False
    return not (before.endswith(_CLOSED) and after[:1].isupper())


def _glue(before: str, after: str, words: frozenset[str]) -> str:
    """The text between a line cut at the wrap width and its continuation.

    A terminal cuts anywhere and keeps the spaces ("" is right); a copy that trimmed them, or
    a re-flow that looked like a cut, lost one (" " is right). Where the cut is between two
    words of the paste or of the KB's vocabulary that are not one word together
    ("memory|utilization"), or right after a comma or colon, a space was lost.
    """
    last, first = before[-1], after[0]
    if last.isspace() or first.isspace():
        return ""
    if ((last in ",;" and not first.isdigit()) or (last == ":" and first.isalnum())
            or (last == "." and first.isupper())):
        return " "
    a = _TAIL_WORD.search(before)
    left = a.group().lower() if a else ""
    if len(left) >= 3 and left in words and (
            first == "`" or (first in "([" and after[1:2].isdigit())):
        return " "  # "increasing|`gpu_memory_utilization`", "max seq len|(262144)"
    if not (last.isalnum() and first.isalnum()) or (last.isdigit() and first.isdigit()):
        return ""
    b = _HEAD_WORD.match(after)
    if a is None or b is None:
        return ""
    head = b.group()
    if head.isdigit():
        # a word that a number follows in messages ("of which|448.00 KiB", "GPU|0 has"); a
        # name cut before its digits ("fp|8", "Qwen|2.5") stays one
        return " " if a.group().lower() in NUMBER_LEADS else ""
    if not (head.isalpha() and (head.islower() or head[1:].islower())):
        return ""  # "Deepseek|V3ForCausalLM", "max_model|_len": the rest of an identifier
    right = head.lower()
    if left + right in words or right in _SUFFIXES:
        return ""
    # A whole word on either side (three letters or more: "in|itializing" is one word) that
    # does not make a word with the other: the cut fell between two words.
    known_right = len(right) >= 3 and right in words
    known_left = len(left) >= 3 and left in words and not left[0].isdigit()
    return " " if known_left or known_right else ""


def _joiner(prev: _Piece | None, piece: _Piece, w: _Widths, words: frozenset[str]
            ) -> str | None:
    """How `piece` continues the previous line (the text between them), or None when it
    starts a new one."""
    if prev is None or not piece.body or not prev.body or _table_row(prev):
        return None
    if not prev.prefix.startswith(piece.prefix):
        # another process, or another record of the same logger (a continuation carries the
        # same prefix, only the part added after the wrap, or none)
        return None
    body, before = piece.body, prev.body
    at = max(prev.raw_len, len(before))
    padded = before.endswith("  ") and not body[0].isspace()  # a terminal's padding, then more
    if w.cut_at_width(prev) and not padded and not (
            body.startswith(("Traceback (", "File \""))):
        return _glue(before, body, words)  # cut at the width
    if (at == w.longest >= _MIN_WIDTH and _inside_text(before, body)
            and not (_RECORD.match(body) or _records_of_functions(before, body)
                     or (_STANDALONE.match(body)
                         and not _rejoins_word(before, body, words)))):
        return _glue(before, body, words)  # the one long line of the paste, cut
    if body[0].isspace() or _STANDALONE.match(before):
        return None
    # With no width to go by, only a line that clearly stops mid-sentence ("... len
    # (1048576)," then "22.5 GiB KV cache is needed") continues.
    mid_sentence = (len(before) >= 40 and (before.endswith(",") or before[-1].isalnum())
                    and (body[0].islower() or body[0].isdigit() or body[0] == "("))
    if (w.soft is None or at < 0.6 * w.soft) and not mid_sentence:
        return None
    if before.rstrip().endswith(_CLOSED) and not (body[0].islower() or body[0].isdigit()):
        return None
    if _RECORD.match(body) or _STANDALONE.match(body) or _FUNCTION_RECORD.match(body):
        return None
    return _reflow_glue(before, body, words)


def _records_of_functions(before: str, body: str) -> bool:
    """Whether both lines are records named by a C function (llama.cpp's log)."""
    return bool(_FUNCTION_RECORD.match(body) and _FUNCTION_RECORD.match(before))


def _rejoins_word(before: str, after: str, words: frozenset[str]) -> bool:
    """Whether the cut fell inside a word: the halves make one the vocabulary knows and the
    second is none on its own ("tile_n_siz|e = 64", which alone reads as a setting)."""
    a, b = _TAIL_WORD.search(before), _HEAD_WORD.match(after)
    if a is None or b is None:
        return False
    left, right = a.group().split("_")[-1].lower(), b.group().lower()
    return left + right in words and right not in words


def _reflow_glue(before: str, after: str, words: frozenset[str]) -> str:
    """A re-flow cuts at spaces, so a space was lost, unless the halves make a known word
    and the second half is none on its own ("cap|acity"): a cut at a width not seen."""
    a = _TAIL_WORD.search(before)
    b = _HEAD_WORD.match(after)
    if a and b and before[-1].isalpha() and after[0].islower():
        left, right = a.group().lower(), b.group().lower()
        if left + right in words and right not in words:
            return ""
    return " "
