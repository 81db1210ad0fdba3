"""`inferbot`: every command. Thin: parse, call the core, render.

Imports happen inside each command so `inferbot diagnose` never pays for SQLAlchemy, paramiko,
Slack or matplotlib. Exit codes: 0 success, 1 failure, 2 bad usage; errors are one line on
stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, BinaryIO, NoReturn

if TYPE_CHECKING:
    from bot.kb.loader import KB
    from bot.kb.testing import ExampleResult
    from bot.schema import Diagnosis

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad arguments or input the user can fix: exit 2."""


class Failure(Exception):
    """Something went wrong that the user cannot fix by retyping: exit 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: {message} (see `{self.prog} --help`)\n")
        sys.exit(EXIT_USAGE)


def _open_input(path: str) -> tuple[BinaryIO, str]:
    """A binary stream for FILE or '-', and a name for messages."""
    if path == "-":
        if sys.stdin.isatty():
            raise UsageError("no input: give a FILE, or pipe a log into `inferbot diagnose -`")
        return sys.stdin.buffer, "stdin"
    try:
        return open(path, "rb"), path  # noqa: SIM115 - closed by the caller
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory, not a log file") from None
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def _load_kb() -> KB:
    from bot.kb.loader import load_kb
    from bot.kb.yamlio import KBError

    try:
        return load_kb()
    except KBError as exc:
        raise Failure(f"the knowledge base is invalid: {exc} (run `inferbot kb validate`)"
                      ) from None


def cmd_diagnose(args: argparse.Namespace) -> int:
    from bot.diagnose import diagnose
    from bot.render.text import render
    from bot.schema import Evidence, to_json

    kb = _load_kb()
    stream, _name = _open_input(args.file)
    try:
        d = diagnose(Evidence(source="cli", host=args.host), kb, stream)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    out = to_json(d, indent=2) if args.json else render(d)
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
    if args.chart:
        _write_chart(d, args.chart)
    return EXIT_OK


def _write_chart(d: Diagnosis, path: str) -> None:
    from bot.sizing.chart import chart_data, write_chart

    try:
        write_chart(chart_data(d), path)
    except OSError as exc:
        raise Failure(f"cannot write chart {path}: {exc.strerror or exc}") from None
    sys.stderr.write(f"chart written to {path}\n")


def cmd_kb(args: argparse.Namespace) -> int:
    from bot.kb.loader import load_kb
    from bot.kb.testing import coverage_errors, run_examples
    from bot.kb.yamlio import KBError

    try:
        kb = load_kb(use_cache=args.action not in ("validate", "test"))
    except KBError as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_FAIL
    if args.action == "list":
        for p in sorted(kb.problems.values(), key=lambda p: p.id):
            sys.stdout.write(f"{p.id:34} r{p.revision}  {p.title}\n")
        for c in sorted(kb.causes.values(), key=lambda c: c.id):
            sys.stdout.write(f"  cause {c.id:28} r{c.revision}  {c.title}\n")
        sys.stdout.write(f"KB {kb.version} ({kb.content_hash})\n")
        return EXIT_OK
    if args.action == "show":
        return _kb_show(kb, args.id)
    results = run_examples(kb)
    failures = [r for r in results if not r.ok]
    if args.action == "test":
        by_problem: dict[str, list[ExampleResult]] = {}
        for r in results:
            by_problem.setdefault(r.problem_id, []).append(r)
        for pid, rs in sorted(by_problem.items()):
            m = [r for r in rs if r.kind == "match"]
            n = [r for r in rs if r.kind == "near_miss"]
            sys.stdout.write(f"{pid:34} match {sum(r.ok for r in m)}/{len(m)}"
                             f"  near-miss {sum(r.ok for r in n)}/{len(n)}\n")
    errors = [*coverage_errors(kb)] if args.action == "validate" else []
    for e in errors:
        sys.stderr.write(f"{e}\n")
    for r in failures:
        sys.stderr.write(f"{r.message()}\n")
    ok = not failures and not errors
    total = len(results)
    sys.stdout.write(f"KB {kb.version} ({kb.content_hash}): {len(kb.problems)} problems, "
                     f"{len(kb.causes)} causes, {total - len(failures)}/{total} examples pass"
                     + ("" if ok else f", {len(failures) + len(errors)} error(s)") + "\n")
    return EXIT_OK if ok else EXIT_FAIL


def _kb_show(kb: KB, ident: str | None) -> int:
    if not ident:
        raise UsageError("kb show needs an id, e.g. `inferbot kb show kv-cache-no-blocks`")
    import yaml

    entry = kb.problems.get(ident) or kb.causes.get(ident)
    if entry is None:
        known = ", ".join(sorted([*kb.problems, *kb.causes]))
        raise UsageError(f"no problem or cause {ident!r}; known: {known}")
    from bot.schema import to_data

    sys.stdout.write(yaml.safe_dump(to_data(entry), sort_keys=False, allow_unicode=True,
                                    width=100))
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "diagnose": cmd_diagnose,
    "kb": cmd_kb,
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="inferbot", description=(
        "Diagnose LLM-inference incidents (vLLM, SGLang, TGI): the cause, the memory "
        "arithmetic with your numbers, and the exact fix."))
    from bot import __version__

    parser.add_argument("--version", action="version", version=f"inferbot {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("diagnose", help="diagnose a pasted error or a whole log",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Diagnose a vLLM / SGLang / TGI error or log.",
                       epilog="examples:\n  inferbot diagnose error.log\n"
                              "  docker logs vllm 2>&1 | inferbot diagnose - --json\n")
    p.add_argument("file", nargs="?", default="-", metavar="FILE|-",
                   help="log file, or - for standard input (default)")
    p.add_argument("--json", action="store_true", help="print the JSON contract")
    p.add_argument("--host", help="tag the incident with this host name")
    p.add_argument("--no-store", action="store_true", help="do not record the incident")
    p.add_argument("--chart", metavar="PNG", help="also write the memory-budget chart")

    p = sub.add_parser("kb", help="validate, test, list or show the knowledge base",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Work with the knowledge base (knowledge/ plus "
                                   "INFERBOT_KB_PATH folders).",
                       epilog="examples:\n  inferbot kb validate\n  inferbot kb test\n"
                              "  inferbot kb show kv-cache-no-blocks\n")
    p.add_argument("action", choices=["validate", "test", "list", "show"])
    p.add_argument("id", nargs="?", help="problem or cause id (for show)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        sys.stderr.write(f"inferbot: {exc}\n")
        return EXIT_USAGE
    except Failure as exc:
        sys.stderr.write(f"inferbot: {exc}\n")
        return EXIT_FAIL
    except KeyboardInterrupt:
        sys.stderr.write("inferbot: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
