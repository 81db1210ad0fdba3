"""`inferbot`: every command. Thin: parse, call the core, render.

Imports happen inside each command so `inferbot diagnose` never pays for SQLAlchemy, paramiko,
Slack or matplotlib. Exit codes: 0 success, 1 failure, 2 bad usage; errors are one line on
stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, BinaryIO, NoReturn

from bot.errors import one_line

if TYPE_CHECKING:
    from bot.authoring.examples import ExampleResult
    from bot.flows import Asker, Recorded
    from bot.kb.loader import KB
    from bot.render.text import Style
    from bot.schema import Diagnosis
    from bot.sizing.calculators import SizeReport

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
        return open(path, "rb"), path
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory, not a log file") from None
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def _load_kb() -> KB:
    from bot.kb.errors import KBError
    from bot.kb.loader import load_kb

    try:
        return load_kb()
    except KBError as exc:
        raise Failure(f"the knowledge base is invalid: {exc} (run `inferbot kb validate`)"
                      ) from None


def _asker() -> Asker:
    """The person at this terminal: their login, when the system can say it."""
    import getpass

    from bot.flows import Asker

    try:
        user: str | None = getpass.getuser()
    except (KeyError, OSError):  # no login name in the environment or the password database
        user = None
    return Asker(origin="cli", user=user)


def cmd_diagnose(args: argparse.Namespace) -> int:
    from bot.flows import Stored, diagnose_and_record
    from bot.render.text import render

    kb = _load_kb()
    stream, _name = _open_input(args.file)
    try:
        # Stored first, so the history line comes second in the answer and the JSON has the
        # incident id: the store's delay is bounded by the database deadline, and an outage
        # costs the history (the incident is spooled), never the answer.
        answer = diagnose_and_record(stream, _asker(), kb, host=args.host,
                                     store=not args.no_store)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    rec = answer.record
    history = rec.history if isinstance(rec, Stored) else None
    if args.json:
        from bot.render.jsonout import diagnosis_json

        sys.stdout.write(diagnosis_json(answer.diagnosis, history) + "\n")
    else:
        sys.stdout.write(render(answer.diagnosis, history, full=args.full, style=_style())
                         + "\n")
    kept = _report(rec)
    sys.stdout.flush()
    if args.chart:
        _write_chart(answer.diagnosis, args.chart)
    return EXIT_OK if kept else EXIT_FAIL


def _style() -> Style:
    """Bold and colour on a terminal (unless NO_COLOR is set), none when piped; the width
    the terminal has."""
    import os

    from bot.render.text import Style

    width = 100  # what shutil.get_terminal_size falls back to, for a pipe without COLUMNS
    tty = sys.stdout.isatty()
    if tty or "COLUMNS" in os.environ:
        import shutil  # only then: it imports three compression modules (2 ms of start-up)

        width = shutil.get_terminal_size((width, 24)).columns
    return Style(color=tty and not os.environ.get("NO_COLOR"), width=width - 1)


def _report(rec: Recorded | None) -> bool:
    """What became of the record when it was not stored: one warning on stderr (spooled), or
    one error when the incident was not kept anywhere (the diagnosis has been given either
    way); False for the last."""
    from bot.flows import NotStored, Spooled

    if isinstance(rec, Spooled):
        sys.stderr.write(f"inferbot: warning: {rec.warning}\n")
    elif isinstance(rec, NotStored):
        sys.stderr.write(f"inferbot: error: incident not stored: {rec.reason}\n")
        return False
    return True


def _store_down(exc: Exception) -> Failure:
    return Failure(f"the incident database is unavailable: {exc}")


def cmd_history(args: argparse.Namespace) -> int:
    from bot.flows import HistoryQuery, StoreDown, history
    from bot.store import format_history_json, format_history_text

    try:
        rows = history(HistoryQuery(host=args.host, problem=args.problem, model=args.model,
                                    engine_version=args.engine_version, status=args.status,
                                    since=args.since, search=args.search, limit=args.limit))
    except ValueError as exc:
        raise UsageError(one_line(exc)) from None
    except StoreDown as exc:
        raise _store_down(exc) from None
    sys.stdout.write((format_history_json(rows) if args.json else format_history_text(rows))
                     + "\n")
    return EXIT_OK


def cmd_resolve(args: argparse.Namespace) -> int:
    from bot.flows import StoreDown, resolve

    try:
        group = resolve(args.id, _asker(), fix=args.fix, note=args.note)
    except ValueError as exc:
        raise UsageError(one_line(exc)) from None
    except LookupError as exc:
        raise Failure(one_line(exc)) from None
    except StoreDown as exc:
        raise _store_down(exc) from None
    sys.stdout.write(f"resolved: {group.explain()}\n")
    return EXIT_OK


def cmd_db(args: argparse.Namespace) -> int:
    from bot.flows import StoreDown, upgrade_store

    try:
        revision = upgrade_store()
    except StoreDown as exc:
        raise _store_down(exc) from None
    sys.stdout.write(f"database at revision {revision}\n")
    return EXIT_OK


def _write_chart(source: Diagnosis | SizeReport, path: str) -> None:
    from bot.sizing.chart import chart_data, write_chart

    try:
        data = chart_data(source)
    except ValueError as exc:  # nothing to draw: a diagnosis without memory arithmetic
        sys.stderr.write(f"inferbot: no chart: {exc}\n")
        return
    try:
        write_chart(data, path)
    except OSError as exc:
        raise Failure(f"cannot write chart {path}: {exc.strerror or exc}") from None
    sys.stderr.write(f"chart written to {path}\n")


def cmd_size(args: argparse.Namespace) -> int:
    from bot.sizing.calculators import render_size_text, size

    try:
        report = size(args.model, args.gpu, gpus=args.gpus, tp=args.tp,
                      max_model_len=args.max_model_len, concurrency=args.concurrency,
                      kv_cache_dtype=args.kv_cache_dtype,
                      gpu_memory_utilization=args.gpu_memory_utilization,
                      quantization=args.quantization, read_files=True)
    except ValueError as exc:
        raise UsageError(one_line(exc)) from None
    sys.stdout.write((report.model_dump_json(indent=2) if args.json
                      else render_size_text(report)) + "\n")
    if args.chart:
        _write_chart(report, args.chart)
    return EXIT_OK


def cmd_kb(args: argparse.Namespace) -> int:
    if args.action == "schema":
        return _kb_schema(args.id)
    from bot.authoring.examples import coverage_errors, run_examples
    from bot.kb.errors import KBError
    from bot.kb.loader import load_kb

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
    gaps = ""
    if args.action == "validate" and (kb.untested.must_match or kb.untested.near_miss):
        gaps = (f"; not yet exercised both ways: {len(kb.untested.must_match)} signatures "
                f"without a must-match, {len(kb.untested.near_miss)} without a near-miss "
                "(untested.yaml)")
    sys.stdout.write(f"KB {kb.version} ({kb.content_hash}): {len(kb.problems)} problems, "
                     f"{len(kb.causes)} causes, {total - len(failures)}/{total} examples pass"
                     + ("" if ok else f", {len(failures) + len(errors)} error(s)") + gaps
                     + "\n")
    return EXIT_OK if ok else EXIT_FAIL


def _kb_schema(kind: str | None) -> int:
    from bot.authoring.schemas import KINDS, render

    if kind not in KINDS:
        raise UsageError(f"kb schema needs one of {', '.join(KINDS)}, e.g. `inferbot kb "
                         "schema problem`")
    sys.stdout.write(render(kind))
    return EXIT_OK


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


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check the deployment's configuration; one line per finding, what to fix in each."""
    from bot.doctor import failed, run_all

    findings = run_all(http=args.http, slack_timeout_s=args.timeout)
    for f in findings:
        if f.level != "ok" or args.verbose:
            sys.stdout.write(f.line() + "\n")
    broken = failed(findings)
    problems = sum(f.level == "fail" for f in findings)
    sys.stdout.write(f"{problems} problem(s) to fix\n" if broken else "all checks passed\n")
    return EXIT_FAIL if broken else EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from bot.config import get_settings
    from bot.slack.app import StartupError, run

    settings = get_settings()  # invalid settings: main's one-line message, not a usage error
    try:
        run(settings, http=args.http, bind=args.bind, port=args.port)
    except ValueError as exc:
        raise UsageError(one_line(exc)) from None
    except StartupError as exc:  # already one redacted line
        raise Failure(str(exc)) from None
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    """Collect from hosts (SSH, or this machine), then diagnose each with its own numbers."""
    from pathlib import Path

    from bot.collect.inventory import EXAMPLE, LOCAL_NAME, InventoryError, InventoryMissing
    from bot.flows import Stored, check_hosts
    from bot.render.jsonout import diagnosis_data
    from bot.render.text import render

    names = [*args.hosts, *([LOCAL_NAME] if args.local else [])]
    if not names:
        raise UsageError("name at least one host, or --local")
    try:
        answers = check_hosts(names, _asker(), _load_kb,
                              inventory=Path(args.inventory) if args.inventory else None,
                              deadline_s=args.deadline, store=not args.no_store)
    except InventoryMissing as exc:
        raise UsageError(f"{one_line(exc)}; the smallest one:\n{EXAMPLE}") from None
    except InventoryError as exc:
        raise UsageError(one_line(exc)) from None
    report = []
    style = _style()
    lost = False  # an incident kept neither in the database nor in the spool
    for a in answers:
        snap, d = a.snapshot, a.answer.diagnosis if a.answer else None
        rec = a.answer.record if a.answer else None
        history = rec.history if isinstance(rec, Stored) else None
        if args.json:
            report.append({**snap.model_dump(mode="json", include={
                "host", "method", "duration_s", "error", "unread"}),
                "commands": [c.model_dump(mode="json", exclude={"output"})
                             for c in snap.commands],
                "diagnosis": diagnosis_data(d, history) if d is not None else None})
            continue
        sys.stdout.write(f"== {snap.host} ({snap.method}, {snap.duration_s:.1f} s)\n")
        if snap.error:
            sys.stdout.write(f"   not collected: {snap.error}\n\n")
            continue
        for line in snap.unread:
            sys.stdout.write(f"   could not read: {line}\n")
        sys.stdout.write(render(d, history, full=args.full, style=style) + "\n"
                         if d is not None else "")
        lost |= not _report(rec)
        sys.stdout.write("\n")
    if args.json:
        sys.stdout.write(json.dumps({"hosts": report}, indent=2, ensure_ascii=False) + "\n")
        for a in answers:
            lost |= not _report(a.answer.record if a.answer else None)
    sys.stdout.flush()
    # Every host not collected is one line on stderr too, as every command says its errors.
    for a in answers:
        error = a.snapshot.error
        if error:
            named = a.refused or error.startswith(f"{a.snapshot.host}:")
            sys.stderr.write(f"inferbot: {'' if named else a.snapshot.host + ': '}{error}\n")
    if any(a.refused for a in answers):
        return EXIT_USAGE
    return EXIT_FAIL if lost or any(a.snapshot.error for a in answers) else EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "diagnose": cmd_diagnose,
    "kb": cmd_kb,
    "size": cmd_size,
    "history": cmd_history,
    "resolve": cmd_resolve,
    "db": cmd_db,
    "check": cmd_check,
    "serve": cmd_serve,
    "doctor": cmd_doctor,
}


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be greater than 0")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} must be in (0, 1], e.g. 0.9")
    return value


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
                              "  inferbot diagnose error.log --full\n"
                              "  docker logs vllm 2>&1 | inferbot diagnose - --json\n")
    p.add_argument("file", nargs="?", default="-", metavar="FILE|-",
                   help="log file, or - for standard input (default)")
    p.add_argument("--full", "--explain", action="store_true", dest="full",
                   help="the whole answer: all numbers, causes, fixes, checks, prevention")
    p.add_argument("--json", action="store_true", help="print the JSON contract")
    p.add_argument("--host", help="tag the incident with this host name")
    p.add_argument("--no-store", action="store_true", help="do not record the incident")
    p.add_argument("--chart", metavar="PNG", help="also write the memory-budget chart")

    p = sub.add_parser("size", help="KV cache, throughput and users for MODEL on GPU",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Three calculators: KV cache memory, a roofline "
                                   "throughput estimate and concurrent users per GPU.",
                       epilog="examples:\n  inferbot size llama-3.1-8b --gpu H100\n"
                              "  inferbot size Qwen/Qwen3-32B --gpu A100-80GB --gpus 2 --tp 2 "
                              "--max-model-len 32768 --kv-cache-dtype fp8 --json\n"
                              "  inferbot size ./config.json --gpu L40S --chart mem.png\n")
    p.add_argument("model", metavar="MODEL",
                   help="catalog name, HF id, or a config.json path / checkpoint folder")
    p.add_argument("--gpu", required=True, metavar="NAME", help="GPU name, e.g. H100, A10G")
    p.add_argument("--gpus", type=_positive_int, metavar="N", help="GPUs available")
    p.add_argument("--tp", type=_positive_int, metavar="N", help="tensor-parallel size")
    p.add_argument("--max-model-len", type=_positive_int, metavar="L")
    p.add_argument("--concurrency", type=_positive_int, metavar="C",
                   help="sequences at max-model-len to hold at once")
    p.add_argument("--kv-cache-dtype", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"])
    p.add_argument("--gpu-memory-utilization", type=_fraction, metavar="U")
    p.add_argument("--quantization", metavar="Q", help="awq, gptq, fp8, ... (weights)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--chart", metavar="PNG", help="also write the memory-budget chart")

    p = sub.add_parser("history", help="incidents seen before, filtered and searched",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="What happened before: stored incidents, newest first.",
                       epilog="examples:\n  inferbot history --host gpu-07 --since 7d\n"
                              "  inferbot history --problem kv-cache-no-blocks --json\n"
                              "  inferbot history --search 'max seq len'\n")
    p.add_argument("--host")
    p.add_argument("--problem", metavar="ID")
    p.add_argument("--model")
    p.add_argument("--engine-version", metavar="V")
    p.add_argument("--status", choices=["open", "resolved"])
    p.add_argument("--since", metavar="WHEN", help="7d, 12h, 30m, 2w or an ISO date")
    p.add_argument("--search", metavar="TEXT", help="words that must all appear")
    p.add_argument("--limit", type=_positive_int, default=50)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("resolve", help="record which fix worked for an incident",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  inferbot resolve 12 --fix '--max-model-len 32768'\n"
                              "  inferbot resolve g3 --fix 'stopped pid 4242' --note 'stale "
                              "engine'\n")
    p.add_argument("id", metavar="ID", help="incident id (12) or group id (g3)")
    p.add_argument("--fix", required=True, help="what fixed it")
    p.add_argument("--note")

    p = sub.add_parser("db", help="database maintenance",
                       epilog="example:\n  inferbot db upgrade")
    p.add_argument("action", choices=["upgrade"])

    p = sub.add_parser("kb", help="validate, test, list or show the knowledge base; its schemas",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Work with the knowledge base (knowledge/ plus "
                                   "INFERBOT_KB_PATH folders).",
                       epilog="examples:\n  inferbot kb validate\n  inferbot kb test\n"
                              "  inferbot kb show kv-cache-no-blocks\n"
                              "  inferbot kb schema problem > problem.schema.json\n")
    p.add_argument("action", choices=["validate", "test", "list", "show", "schema"])
    p.add_argument("id", nargs="?",
                   help="problem or cause id (show); file kind (schema: problem, cause, "
                        "examples, ...)")

    p = sub.add_parser("serve", help="run the Slack app (Socket Mode, or HTTP with --http)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Run the Slack bot. Socket Mode needs SLACK_APP_TOKEN; HTTP "
                                   "mode needs SLACK_SIGNING_SECRET; both need SLACK_BOT_TOKEN.",
                       epilog="examples:\n  SLACK_APP_TOKEN=xapp-... SLACK_BOT_TOKEN=xoxb-... "
                              "inferbot serve\n  inferbot serve --http --port 3000\n")
    p.add_argument("--http", action="store_true",
                   help="serve the Events API endpoint /slack/events instead of Socket Mode")
    p.add_argument("--port", type=int, default=3000, help="HTTP port (default 3000; 0 = any)")
    p.add_argument("--bind", default="0.0.0.0", help="HTTP address (default 0.0.0.0)")
    p = sub.add_parser("doctor", help="check tokens, database, inventory and KB; say what to fix",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Check the configuration `inferbot serve` will run with: "
                                   "every INFERBOT_* variable, the Slack tokens (format, and "
                                   "auth.test where Slack is reachable), the database "
                                   "(reachable, migrated), the inventory (each host's key in "
                                   "known_hosts) and the knowledge base. One line per "
                                   "problem; exit 1 if anything is broken.",
                       epilog="examples:\n  inferbot doctor\n  inferbot doctor --http -v\n")
    p.add_argument("--http", action="store_true",
                   help="check for HTTP mode (signing secret) instead of Socket Mode")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S",
                   help="seconds to wait for Slack's auth.test (default 5)")
    p.add_argument("-v", "--verbose", action="store_true", help="also print what is fine")
    p = sub.add_parser("check", help="collect from GPU hosts over SSH (or --local) and diagnose",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Collect GPU state, the server's flags and logs and the "
                                   "model's config from inventory hosts, in parallel, then "
                                   "diagnose each. Only hosts in the inventory "
                                   "(INFERBOT_INVENTORY or ~/.config/inferbot/hosts.yaml) are "
                                   "contacted, with verified host keys and key authentication.",
                       epilog="examples:\n  inferbot check gpu-07\n"
                              "  inferbot check gpu-01 gpu-02 gpu-03 --json\n"
                              "  inferbot check --local\n")
    p.add_argument("hosts", nargs="*", metavar="HOST",
                   help="inventory host names; `localhost` reads this machine")
    p.add_argument("--local", action="store_true", help="also read this machine (NVML)")
    p.add_argument("--full", "--explain", action="store_true", dest="full",
                   help="each host's whole answer, not its first screen")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--deadline", type=float, default=30.0, metavar="S",
                   help="seconds each host may take (default 30)")
    p.add_argument("--inventory", metavar="PATH", help="inventory file to use")
    p.add_argument("--no-store", action="store_true", help="do not record the incidents")

    return parser


# Commands that cannot run without valid Settings: they are read before the command starts, so
# an invalid variable is one line naming it, not a failure halfway through. (`diagnose`
# answers first and only warns that storing failed; `doctor` reports every variable itself.)
_NEEDS_SETTINGS = frozenset({"history", "resolve", "db", "check", "serve"})


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        if args.command in _NEEDS_SETTINGS:
            from bot.config import get_settings

            get_settings()
        return COMMANDS[args.command](args)
    except UsageError as exc:
        sys.stderr.write(f"inferbot: {exc}\n")
        return EXIT_USAGE
    except Failure as exc:
        sys.stderr.write(f"inferbot: {exc}\n")
        return EXIT_FAIL
    except ValueError as exc:
        if getattr(exc, "title", None) != "Settings":
            raise  # not configuration: a bug, keep the traceback
        sys.stderr.write(f"inferbot: {one_line(exc)}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("inferbot: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
