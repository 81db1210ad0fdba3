"""The server's own command line, as the evidence shows it, and a fix applied to it.

A fix is safe to paste only if it keeps what the server was started with: a command rebuilt
from a template (`vllm serve MODEL --max-model-len N`) drops `--tensor-parallel-size 2`,
`--quantization fp8` or `--port 8001`, and the restarted server is not the one that failed.
So the scan keeps the first command line that starts a server (`vllm serve ...`, `python -m
vllm.entrypoints.openai.api_server ...`, SGLang's and TGI's launchers) or, failing that, vLLM's
echo of its arguments (`non-default args: {...}`), and a fix is that line with only the flags
the fix sets changed. Secrets are redacted before the line is kept.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import field
from typing import ClassVar

from bot.evidence.base import FactSink, Line
from bot.evidence.redact import redact
from bot.lazyre import lazy
from bot.structs import struct

Value = str | int | float | bool | None

# How each engine is started, as the program tokens a command line begins with.
_PROGRAMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vllm", ("vllm", "serve")),
    ("vllm", ("python", "-m", "vllm.entrypoints.openai.api_server")),
    ("vllm", ("python3", "-m", "vllm.entrypoints.openai.api_server")),
    ("sglang", ("python", "-m", "sglang.launch_server")),
    ("sglang", ("python3", "-m", "sglang.launch_server")),
    ("tgi", ("text-generation-launcher",)),
    ("lmdeploy", ("lmdeploy", "serve", "api_server")),
)
# The flags that name the model (vLLM's `serve` also takes it as its first word).
MODEL_FLAGS = frozenset({"--model", "--model-path", "--model-id"})
_ECHO = "non-default args"
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]{2,}$")
MAX_COMMAND_CHARS = 2000
# The flags that set the tensor-parallel size, as each engine spells them (dashed). A whole
# vLLM, SGLang or lmdeploy command without one runs on one GPU; TGI shards over every visible
# GPU, and a `--config` file may set it, so neither says anything.
_TP_SETTERS = frozenset({"--tensor-parallel-size", "-tp", "--tp", "--tp-size", "--config"})
# A model as a command names it: a repo id, a path or a name with a size or version in it. A
# plain word ("vllm serve or the training script") is a sentence naming the command.
_CHECKPOINT = re.compile(r"[/\d._-]")


@struct(slots=True)
class ServerCommand:
    """A server's command line: the program, the positional model (vLLM), and the flags in
    the order written (`None`: an on/off flag). `form`: "shell" as typed, or "args" when it
    was a container's args list (a Kubernetes manifest), where a fix is shown that way too."""

    engine: str
    program: tuple[str, ...]
    model: str | None = None
    flags: list[tuple[str, Value]] = field(default_factory=list)
    form: str = "shell"

    def args(self) -> list[str]:
        """The flags as a container's args list."""
        out: list[str] = []
        for flag, value in self.flags:
            out.append(flag)
            if value is not None and value is not True:
                out.append(_shown(value))
        return out

    def get(self, flag: str) -> Value:
        return next((v for f, v in self.flags if f == flag), None)

    def get_model(self) -> Value:
        """The model a flag names (`--model`, `--model-path`, `--model-id`)."""
        return next((v for f, v in self.flags if f in MODEL_FLAGS), None)

    def has(self, flag: str) -> bool:
        return any(f == flag for f, _ in self.flags)

    def text(self) -> str:
        words = [*self.program]
        if self.model is not None:
            words.append(self.model)
        for flag, value in self.flags:
            words.append(flag)
            if value is not None and value is not True:
                words.append(_word(value))
        return " ".join(words)


def _word(value: Value) -> str:
    text = _shown(value)
    return shlex.quote(text) if text and any(c.isspace() or c in "'\"$;&|" for c in text) \
        else text


def _shown(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value == int(value) and abs(value) >= 1:
        return str(int(value))
    return "" if value is None else str(value)


def parse_command(line: str) -> ServerCommand | None:
    """The server command on `line` (after any `$ ` prompt or `docker run ... IMAGE`), or
    None when the line starts none."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote: read the words as written
        words = line.split()
    words = [w.strip("`") for w in words]  # a command quoted as inline code
    for start in range(len(words)):
        for engine, program in _PROGRAMS:
            end = start + len(program)
            if tuple(w.rsplit("/", 1)[-1] if i == 0 else w
                     for i, w in enumerate(words[start:end])) == program:
                return _read(engine, program, words[end:])
    return None


def _read(engine: str, program: tuple[str, ...], rest: list[str]) -> ServerCommand:
    cmd = ServerCommand(engine, program)
    i = 0
    if engine in ("vllm", "lmdeploy") and program[-1] in ("serve", "api_server") and rest \
            and not rest[0].startswith("-"):
        cmd.model, i = rest[0], 1
    while i < len(rest):
        word = rest[i]
        i += 1
        if word in ("\\", "|", "&&", ";", "2>&1") or word.startswith((">", "|")):
            break
        if not word.startswith("-") or word in ("-", "--"):
            continue
        flag, eq, value = word.partition("=")
        flag = _dashed(flag)
        if eq:
            cmd.flags.append((flag, parse_value(value)))
        elif i < len(rest) and not _is_flag(rest[i]) and rest[i] not in ("\\", "|", "&&"):
            cmd.flags.append((flag, parse_value(rest[i])))
            i += 1
        else:
            cmd.flags.append((flag, None))
    return cmd


def _dashed(flag: str) -> str:
    """`--max_model_len` is `--max-model-len`; short flags (`-tp`) stay as written."""
    if flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-")
    return flag


def _is_flag(word: str) -> bool:
    if not word.startswith("-"):
        return False
    try:
        float(word)
    except ValueError:
        return True
    return False


def parse_value(text: str) -> str | int | float:
    """A flag's value as written: an integer, a number, else the text."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def from_args(words: list[str]) -> ServerCommand | None:
    """A container's args list (`args: ["--model", "m", "--max-model-len", "131072"]`) as the
    `vllm serve` it stands for; None unless it names vLLM's flags."""
    cmd = _read("vllm", ("vllm", "serve"), [w for w in words if w])
    names = {f for f, _ in cmd.flags}
    if not names & {"--model", "--max-model-len", "--tensor-parallel-size",
                    "--gpu-memory-utilization"}:
        return None
    cmd.form = "args"
    return cmd


_INLINE_ARGS = re.compile(r"^\s{0,40}(?:-\s{1,4})?args:\s{0,4}(\[.{0,1900}\])\s{0,40}$")
_ARGS_KEY = re.compile(r"^\s{0,40}(?:-\s{1,4})?args:\s{0,4}$")
_ITEM = re.compile(r"^\s{0,40}-\s{1,4}(.{1,500}?)\s{0,40}$")


def _unquote(word: str) -> str:
    word = word.strip()
    return word[1:-1] if len(word) >= 2 and word[0] == word[-1] and word[0] in "'\"" else word


def from_echo(line: str) -> ServerCommand | None:
    """vLLM's `non-default args: {'model': ..., 'max_model_len': 1048576, ...}` as the
    `vllm serve` line it stands for."""
    body = line[line.index(_ECHO):]
    start, end = body.find("{"), body.rfind("}")
    if start == -1 or end <= start:
        return None
    try:
        parsed = ast.literal_eval(body[start:end + 1])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(parsed, dict):
        return None
    cmd = ServerCommand("vllm", ("vllm", "serve"))
    for key, value in parsed.items():
        if not isinstance(key, str) or isinstance(value, dict):
            continue
        if key == "model" and isinstance(value, str):
            cmd.model = value
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                cmd.flags.append((flag, None))
        elif isinstance(value, list):
            if value and all(isinstance(v, str) for v in value):
                cmd.flags.append((flag, " ".join(value)))
        elif isinstance(value, (str, int, float)):
            cmd.flags.append((flag, value))
    return cmd if cmd.model or cmd.flags else None


class CommandReader:
    """A scan consumer: the first server command line of the paste, else vLLM's echo of its
    non-default arguments. Lines that a shell continued (`\\`) are joined first."""

    name: ClassVar[str] = "command"
    anchors: ClassVar[tuple[str, ...]] = (
        "vllm serve", "vllm.entrypoints.openai.api_server", "sglang.launch_server",
        "text-generation-launcher", "lmdeploy serve", _ECHO, "args:")
    follow: ClassVar[int] = 40  # a shell line's continuations, a manifest's args items

    def __init__(self) -> None:
        self.command: ServerCommand | None = None
        self._echo: ServerCommand | None = None
        self._pending = ""
        self._items: list[str] | None = None  # a manifest's `args:` items being read

    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text.strip()
        if self._items is not None:
            item = _ITEM.match(line.text)
            if item and self.command is None:
                self._items.append(_unquote(redact(item.group(1))))
                return
            self._end_items()
        if self.command is None and (_ARGS_KEY.match(line.text)
                                     or _INLINE_ARGS.match(line.text)):
            self._args(line.text)
            return
        if self._pending:
            self._pending += " " + text.rstrip("\\").strip()
            if not text.endswith("\\"):
                self._take(self._pending)
            return
        if (self.command is not None or len(text) > MAX_COMMAND_CHARS
                or not any(a in text for a in self.anchors)):
            return  # found already, or a line followed for a continuation that is not one
        if _ECHO in text:
            if self._echo is None:
                self._echo = from_echo(redact(text))
            return
        if text.endswith("\\") and parse_command(text.rstrip("\\")) is not None:
            self._pending = text.rstrip("\\").strip()
            return
        self._take(text)

    def _args(self, text: str) -> None:
        inline = _INLINE_ARGS.match(text)
        if inline is None:
            self._items = []
            return
        try:
            words = ast.literal_eval(redact(inline.group(1)))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return
        if isinstance(words, list) and all(isinstance(w, (str, int, float)) for w in words):
            self.command = from_args([str(w) for w in words])

    def _end_items(self) -> None:
        items, self._items = self._items, None
        if items and self.command is None:
            self.command = from_args(items)

    def _take(self, text: str) -> None:
        self._pending = ""
        if self.command is None and len(text) <= MAX_COMMAND_CHARS:
            self.command = parse_command(redact(text))

    def finish(self, sink: FactSink) -> None:
        if self._items is not None:
            self._end_items()
        if self._pending:
            self._take(self._pending)
        if self.command is None:
            self.command = self._echo
        cmd = self.command
        model = cmd and (cmd.model or cmd.get_model())
        if (cmd is not None and cmd.engine in ("vllm", "sglang", "lmdeploy")
                and isinstance(model, str)
                and _CHECKPOINT.search(model)
                and not any(f in _TP_SETTERS for f, _ in cmd.flags)):
            sink.set_default("tensor_parallel_size", 1)

    @property
    def observed(self) -> str | None:
        return self.command.text() if self.command is not None else None


# A server configured from its environment: `docker run -e NAME=value`, a manifest's
# `- name: NAME` / `value: ...` pair, a compose file's `- NAME=value`.
_DOCKER_ENV = lazy(r"(?:^|\s)(?:-e|--env)[ =]([A-Z][A-Z0-9_]{1,63})="
                   r"(\"[^\"]{0,200}\"|'[^']{0,200}'|[^\s\"']{1,200})")
_MANIFEST_NAME = lazy(r"^\s{0,40}-\s{1,4}name:\s{0,4}[\"']?([A-Z][A-Z0-9_]{1,63})[\"']?"
                      r"\s{0,40}$")
_MANIFEST_VALUE = lazy(r"^\s{0,40}value:\s{0,4}(\"[^\"]{0,200}\"|'[^']{0,200}'|\S{1,200})"
                       r"\s{0,40}$")
_COMPOSE_ITEM = lazy(r"^\s{0,40}-\s{1,4}[\"']?([A-Z][A-Z0-9_]{1,63})=([^\"'\s]{1,200})[\"']?"
                     r"\s{0,40}$")


@struct(slots=True)
class EnvSettings:
    """The environment a server ran with, as the paste shows it: names and values (redacted),
    and the form they were written in ("docker", "manifest", "compose"), in which a fix that
    sets one of them is shown too."""

    form: str
    values: dict[str, str] = field(default_factory=dict)

    def lines(self, settings: dict[str, str]) -> list[str]:
        """`settings` written as this environment writes them."""
        if self.form == "docker":
            return [" ".join(f"-e {n}={shlex.quote(v)}" for n, v in settings.items())]
        if self.form == "manifest":
            return [line for n, v in settings.items()
                    for line in (f"- name: {n}", f"  value: {json.dumps(v)}")]
        return [f"- {n}={v}" for n, v in settings.items()]


def env_value(value: Value) -> str:
    """A flag's value as an environment variable holds it (an on/off flag: "true")."""
    return "true" if value is None else _shown(value)


def env_name(flag: str) -> str:
    """The variable a server configured from its environment reads for `flag`
    (--max-total-tokens: MAX_TOTAL_TOKENS), as TGI's launcher and the serverless vLLM
    workers name them."""
    return flag.lstrip("-").upper().replace("-", "_")


class EnvReader:
    """A scan consumer: the environment variables the paste shows the server started with."""

    name: ClassVar[str] = "environment"
    anchors: ClassVar[tuple[str, ...]] = ("-e ", "--env", "- name:", "value:", "environment:")
    follow: ClassVar[int] = 40  # a compose file's `environment:` items

    def __init__(self) -> None:
        self.settings: EnvSettings | None = None
        self._name: tuple[str, int] | None = None  # a manifest's name awaiting its value

    def _set(self, form: str, name: str, value: str) -> None:
        if self.settings is None:
            self.settings = EnvSettings(form)
        self.settings.values.setdefault(name, redact(_unquote(value)))

    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text
        if len(text) > MAX_COMMAND_CHARS:
            return
        if "-e " in text or "--env" in text:
            for name, value in _DOCKER_ENV.findall(text):
                self._set("docker", name, value)
        if (m := _MANIFEST_NAME.match(text)) is not None:
            self._name = (m.group(1), line.no)
        elif self._name is not None and (v := _MANIFEST_VALUE.match(text)) is not None:
            if line.no == self._name[1] + 1:
                self._set("manifest", self._name[0], v.group(1))
            self._name = None
        elif (c := _COMPOSE_ITEM.match(text)) is not None:
            self._set("compose", c.group(1), c.group(2))

    def finish(self, sink: FactSink) -> None:
        """No fact to set: the planner reads `settings` to write fixes the same way."""


def placeholders(command: str) -> list[str]:
    """The words of a command a person must fill in (MODEL, AWQ_CHECKPOINT_OF_THE_MODEL):
    upper-case names, not environment assignments, not in a trailing comment."""
    words = command.split("#", 1)[0].split()
    return list(dict.fromkeys(w for w in words if _PLACEHOLDER.match(w)))


@struct(frozen=True, slots=True)
class Applied:
    """A fix applied to the server's command line: the whole line, the change alone, and the
    args list when the server ran from one."""

    command: str
    change: str
    args: list[str] | None = None


def apply_flags(base: ServerCommand, template: ServerCommand, changes: dict[str, Value],
                current: dict[str, Value] | None = None) -> Applied:
    """`base` with the flags `changes` names set as `template` writes them, the model taken
    from the template only when it names another checkpoint (a placeholder such as
    AWQ_CHECKPOINT_OF_THE_MODEL); every other flag of `base` kept, in its place. `current`:
    the values the server ran with where its command line did not say them (the engine's
    echo, the error), to say the change as "old -> new"."""
    out = ServerCommand(base.engine, base.program, base.model, list(base.flags), base.form)
    said: list[str] = []
    if template.model and _PLACEHOLDER.match(template.model) and template.model != "MODEL":
        said.append(f"model {base.model or 'MODEL'} -> {template.model}")
        out.model = template.model
    elif (out.model is None and base.engine == "vllm" and base.program[-1] == "serve"
          and not base.has("--model")):
        out.model = template.model
    for flag, value in changes.items():
        shown = None if value is True else value
        if out.has(flag):
            old = out.get(flag)
            if _shown(old) == _shown(shown):
                continue
            out.flags = [(f, shown if f == flag else v) for f, v in out.flags]
            said.append(f"{flag} {_shown(old)} -> {_shown(shown)}".replace("  ", " ")
                        if old is not None else f"{flag} -> {_shown(shown)}")
        else:
            out.flags.append((flag, shown))
            old = (current or {}).get(flag)
            if old is not None and shown is not None and _shown(old) != _shown(shown):
                said.append(f"{flag} {_shown(old)} -> {_shown(shown)}")
            else:
                said.append(f"add {flag}" + (f" {_word(shown)}" if shown is not None else ""))
    return Applied(out.text(), "; ".join(said), out.args() if out.form == "args" else None)


def change_only(changes: dict[str, Value]) -> str:
    """The change when the server's command line is unknown: the flags to set."""
    return " ".join(flag + (f" {_word(v)}" if v is not None and v is not True else "")
                    for flag, v in changes.items())
