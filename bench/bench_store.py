"""Incident-store benchmark: bulk write rate, then history query latency on a big store.

Generates N events (default 1,000,000) spread over a year, 500 hosts, 11 problems, 12 models
and 20,000 incident groups, bulk-loads them into a fresh database per engine (SQLite file in a
temporary directory; a scratch database on the PostgreSQL server, dropped afterwards), then
times the `inferbot history` queries through the real code path (`bot.store.history`):
by host and time range, by problem, and text search alone and combined with each filter (host,
problem, model and version, a recent or an old time window). Target: p95 < 50 ms each.

    python bench/bench_store.py                    # 1,000,000 events, SQLite and PostgreSQL
    python bench/bench_store.py --events 100000 --engines sqlite

The bulk load uses the fastest honest path per engine with every index and search trigger in
place (executemany in large transactions on SQLite, COPY on PostgreSQL): it is what an import
would do, not what `record()` does per diagnosis (that is one short transaction each).

`--keep` leaves the stores in place; `--measure-only URL` times the queries on one again, e.g.
after `INFERBOT_DATABASE_URL=URL inferbot db upgrade` migrated it in place.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import insert, text
from sqlalchemy.engine import Engine, make_url

from bot.config import Settings
from bot.fingerprint import fingerprint
from bot.store import history, upgrade
from bot.store.db import dispose_engines, get_engine
from bot.store.search import compact
from bot.store.tables import IncidentEvent, IncidentGroup

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
HOSTS = [f"gpu-{i:03d}" for i in range(500)]
MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.3-70B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "deepseek-ai/DeepSeek-V3",
    "google/gemma-2-27b-it",
    "microsoft/Phi-3-mini-4k-instruct",
    "01-ai/Yi-34B-Chat",
    "tiiuae/falcon-40b",
]
VERSIONS = ["0.5.5", "0.6.3", "0.6.6", "0.7.3", "0.8.3", "0.8.5", "0.9.1", "0.10.0"]
# problem id -> signature templates ({a}, {b}, {c} are filled with varying numbers)
TEMPLATES: dict[str, list[str]] = {
    "kv-cache-no-blocks": [
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        "RuntimeError: KV cache allocation failed: num_gpu_blocks={a} <= 0",
    ],
    "max-model-len-exceeds-kv-cache": [
        "ValueError: To serve at least one request with the models's max seq len ({a}), "
        "({b}.{c} GiB KV cache is needed, which is larger than the available KV cache memory "
        "({c}.{b} GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`",
        "ValueError: The model's max seq len ({a}) is larger than the maximum number of tokens "
        "that can be stored in KV cache ({b}). Try increasing `gpu_memory_utilization`",
    ],
    "free-memory-below-utilization": [
        "ValueError: Free memory on device ({b}.{c}/79.19 GiB) on startup is less than desired "
        "GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization",
    ],
    "oom-loading-weights": [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {b}.{c} GiB. GPU 0 has a "
        "total capacity of 79.19 GiB of which {c}.{b} MiB is free. while loading model weights",
    ],
    "oom-during-startup-profiling": [
        "torch.OutOfMemoryError: CUDA out of memory during profile_run. Tried to allocate "
        "{b}.{c} GiB (max_num_batched_tokens={a})",
        "RuntimeError: CUDA error: out of memory during CUDA graph capture (batch size {a})",
    ],
    "oom-under-load": [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {c}.{b} GiB. Process {a} "
        "has 78.20 GiB memory in use. Of the allocated memory 76.1 GiB is allocated by PyTorch",
    ],
    "kv-cache-preemption": [
        "WARNING Sequence group {a} is preempted by PreemptionMode.RECOMPUTE mode because there "
        "is not enough KV cache space. total_num_cumulative_preemption={b}",
    ],
    "low-throughput": [
        "Avg prompt throughput: {b}.{c} tokens/s, Avg generation throughput: {c}.{b} tokens/s, "
        "Running: 1 reqs, Swapped: 0 reqs, Pending: {a} reqs, GPU KV cache usage: 99.{c}%",
    ],
    "nccl-failure": [
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:{a}, unhandled "
        "system error, NCCL version 2.21.5",
        "[Rank {c}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={a}, "
        "OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
    ],
    "nvidia-driver-failure": [
        "RuntimeError: Failed to initialize NVML: Driver/library version mismatch",
        "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error. "
        "NVRM: Xid (PCI:0000:3b:00): 79, pid={a}, GPU has fallen off the bus.",
    ],
    "unsupported-hardware-or-dtype": [
        "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least "
        "8.0. Your Tesla T4 GPU has compute capability 7.5.",
    ],
}
CAUSES = {
    "kv-cache-no-blocks": "max-model-len-too-large",
    "max-model-len-exceeds-kv-cache": "max-model-len-too-large",
    "free-memory-below-utilization": "foreign-process-holds-memory",
    "oom-loading-weights": "weights-too-large-for-budget",
    "oom-during-startup-profiling": "activation-peak-large",
    "oom-under-load": "gpu-memory-utilization-too-low",
    "kv-cache-preemption": "concurrency-exceeds-kv",
    "low-throughput": "max-num-seqs-too-low",
    "nccl-failure": "nccl-p2p",
    "nvidia-driver-failure": "driver-mismatch",
    "unsupported-hardware-or-dtype": "bf16-on-old-gpu",
}
SEARCHES = [
    "cache blocks",  # ~9 % of events
    "collective operation timeout",  # ~4.5 %
    "Driver/library version mismatch",  # ~4.5 %
    "compute capability 7.5",  # ~9 %
    "fallen off the bus",  # ~4.5 %
    "Mixtral",  # ~8 % (model name in the excerpt)
]


@dataclass
class Group:
    id: int
    problem: str
    template: int
    host: str
    model: str
    version: str


def make_groups(n: int, rng: random.Random) -> list[Group]:
    problems = list(TEMPLATES)
    groups = []
    for i in range(1, n + 1):
        problem = rng.choice(problems)
        groups.append(
            Group(
                i,
                problem,
                rng.randrange(len(TEMPLATES[problem])),
                rng.choice(HOSTS),
                rng.choice(MODELS),
                rng.choice(VERSIONS),
            )
        )
    return groups


def group_rows(groups: list[Group], start: datetime) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        line = TEMPLATES[g.problem][g.template]
        fp = fingerprint(g.problem, line, g.host, g.model)
        rows.append(
            {
                "id": g.id,
                "fingerprint": f"{fp.digest[:20]}{g.id:012d}",
                "problem_id": g.problem,
                "signature": fp.signature,
                "host": g.host,
                "model": fp.model,
                "engine": "vllm",
                "engine_version": g.version,
                "kb_version": "2026.11.1",
                "first_seen": start,
                "last_seen": start,
                "count": 0,
                "status": "open",
            }
        )
    return rows


def events(
    n: int, groups: list[Group], start: datetime, span: timedelta, rng: random.Random
) -> Iterator[dict[str, Any]]:
    """Events in time order (as they arrive in production), skewed towards hot groups."""
    step = span / n
    hot = groups[: max(1, len(groups) // 50)]
    for i in range(n):
        g = rng.choice(hot) if rng.random() < 0.3 else rng.choice(groups)
        created = start + step * i
        nums = {"a": rng.randrange(1, 200_000), "b": rng.randrange(100), "c": rng.randrange(100)}
        line = TEMPLATES[g.problem][g.template].format(**nums)
        stamp = created.strftime("%m-%d %H:%M:%S")
        excerpt = (
            f"INFO {stamp} [api_server.py:{nums['b']}] vLLM API server version {g.version}\n"
            f"INFO {stamp} [config.py:{nums['c']}] model={g.model} max_model_len={nums['a']}\n"
            f"ERROR {stamp} [engine.py:{nums['b']}] (pid={nums['a']}) {line}"
        )
        cause = CAUSES[g.problem]
        problems = [{"id": g.problem, "title": g.problem.replace("-", " "), "confidence": 0.9}]
        causes = [{"id": cause, "title": cause.replace("-", " "), "confidence": 0.7}]
        facts = {
            "engine": "vllm",
            "engine_version": g.version,
            "model": g.model,
            "max_model_len": nums["a"],
            "gpu_memory_utilization": 0.9,
            "gpu_total_gib": 79.19,
        }
        fixes = [
            {
                "id": "lower-max-model-len",
                "title": "Lower --max-model-len",
                "command": f"vllm serve {g.model} --max-model-len 32768",
                "flags": {"--max-model-len": 32768},
            }
        ]
        yield {
            "event_uid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "group_id": g.id,
            "created_at": created,
            "recorded_at": created,
            "source": "slack" if i % 3 else "cli",
            "channel": "C0INCIDENTS",
            "thread": f"{int(created.timestamp())}.{i % 1000:06d}",
            "permalink": (f"https://example.slack.com/archives/C0INCIDENTS/p{i:016d}"
                          if i % 3 else None),
            "user_name": f"U{rng.randrange(40):04d}",
            "host": g.host,
            "model": g.model,
            "engine": "vllm",
            "engine_version": g.version,
            "problem_id": g.problem,
            "fingerprint": f"{i:032x}",
            "kb_version": "2026.11.1",
            "problems": problems,
            "causes": causes,
            "facts": facts,
            "fixes": fixes,
            "excerpt": excerpt,
            "labels": " ".join(f"{p['id']} {p['title']}" for p in problems + causes),
            "diagnosis": {
                "kb_version": "2026.11.1",
                "problems": problems,
                "causes": causes,
                "facts": facts,
                "fixes": fixes,
            },
        }


def batched(it: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in it:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


EVENT_COLUMNS = [c.name for c in IncidentEvent.__table__.columns if c.name != "id"]
JSON_COLUMNS = {"problems", "causes", "facts", "fixes", "diagnosis"}


def load(engine: Engine, n: int, args: argparse.Namespace) -> tuple[float, datetime]:
    """Bulk-load groups and n events; returns (seconds, newest event time)."""
    rng = random.Random(args.seed)
    end = datetime.now(UTC).replace(microsecond=0)
    span = timedelta(days=365)
    start = end - span
    groups = make_groups(args.groups, rng)
    started = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(insert(IncidentGroup), group_rows(groups, start))
    done = 0
    if engine.dialect.name == "postgresql":
        raw = engine.raw_connection()
        try:
            cur = raw.cursor()
            cols = ", ".join(EVENT_COLUMNS)
            with cur.copy(f"COPY incident_events ({cols}) FROM STDIN") as copy:
                for row in events(n, groups, start, span, rng):
                    copy.write_row(
                        [json.dumps(row[c]) if c in JSON_COLUMNS else row[c] for c in EVENT_COLUMNS]
                    )
                    done += 1
                    if done % 200_000 == 0:
                        progress(done, n, started)
            raw.commit()
        finally:
            raw.close()
    else:
        for batch in batched(events(n, groups, start, span, rng), 50_000):
            with engine.begin() as conn:
                conn.execute(insert(IncidentEvent), batch)
            done += len(batch)
            if done % 200_000 == 0:
                progress(done, n, started)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(
                text(
                    "UPDATE incident_groups g SET count = s.c, first_seen = s.f, last_seen = s.l "
                    "FROM (SELECT group_id, count(*) c, min(created_at) f, max(created_at) l "
                    "FROM incident_events GROUP BY group_id) s WHERE s.group_id = g.id"
                )
            )
        else:
            conn.execute(
                text(
                    "UPDATE incident_groups SET "
                    "count = (SELECT count(*) FROM incident_events e WHERE e.group_id = "
                    "incident_groups.id), "
                    "first_seen = coalesce((SELECT min(created_at) FROM incident_events e WHERE "
                    "e.group_id = incident_groups.id), first_seen), "
                    "last_seen = coalesce((SELECT max(created_at) FROM incident_events e WHERE "
                    "e.group_id = incident_groups.id), last_seen)"
                )
            )
    elapsed = time.perf_counter() - started
    analyze_started = time.perf_counter()
    # What autovacuum does soon after a big load in production: statistics for the planner
    # and, on PostgreSQL, hint bits and the visibility map, so the first reads of freshly
    # loaded rows do not pay for writing them (that would time the load, not the queries).
    # On SQLite, what `inferbot db upgrade` does after an import: compact the text index.
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
        print(f"  VACUUM ANALYZE: {time.perf_counter() - analyze_started:.1f} s")
    else:
        with engine.begin() as conn:
            compact(conn)
        print(f"  compact (FTS5 optimize, ANALYZE): {time.perf_counter() - analyze_started:.1f} s")
    return elapsed, end


def progress(done: int, n: int, started: float) -> None:
    rate = done / (time.perf_counter() - started)
    print(f"  ... {done:,}/{n:,} events, {rate:,.0f} events/s", flush=True)


def timed(fn: Callable[[], object], reps: int) -> tuple[float, float, float]:
    fn()  # warm: first-use checks, statement cache, page cache
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * len(samples)) - 1)]
    return statistics.median(samples), p95, samples[-1]


def measure(settings: Settings, end: datetime, reps: int, seed: int) -> list[tuple[str, Any]]:
    rng = random.Random(seed + 1)

    def host_range() -> object:
        since = end - timedelta(days=rng.randrange(7, 365))
        return history(
            host=rng.choice(HOSTS),
            since=since,
            until=since + timedelta(days=7),
            settings=settings,
        )

    def host_latest() -> object:
        return history(host=rng.choice(HOSTS), since="30d", settings=settings)

    def by_problem() -> object:
        return history(problem=rng.choice(list(TEMPLATES)), settings=settings)

    def problem_range() -> object:
        since = end - timedelta(days=rng.randrange(7, 365))
        return history(
            problem=rng.choice(list(TEMPLATES)),
            since=since,
            until=since + timedelta(days=7),
            settings=settings,
        )

    def search() -> object:
        return history(search=rng.choice(SEARCHES), settings=settings)

    def search_host() -> object:
        return history(search=rng.choice(SEARCHES), host=rng.choice(HOSTS), settings=settings)

    def search_recent() -> object:
        return history(search=rng.choice(SEARCHES), since="30d", settings=settings)

    def search_window() -> object:
        since = end - timedelta(days=rng.randrange(7, 365))
        return history(search=rng.choice(SEARCHES), since=since,
                       until=since + timedelta(days=7), settings=settings)

    def search_host_window() -> object:
        since = end - timedelta(days=rng.randrange(30, 365))
        return history(search=rng.choice(SEARCHES), host=rng.choice(HOSTS), since=since,
                       until=since + timedelta(days=30), settings=settings)

    def search_problem() -> object:
        return history(search=rng.choice(SEARCHES), problem=rng.choice(list(TEMPLATES)),
                       settings=settings)

    def search_model_version() -> object:
        return history(search=rng.choice(SEARCHES), model=rng.choice(MODELS),
                       engine_version=rng.choice(VERSIONS), settings=settings)

    return [
        ("history --host H --since/--until (7-day window)", timed(host_range, reps)),
        ("history --host H --since 30d", timed(host_latest, reps)),
        ("history --problem P", timed(by_problem, reps)),
        ("history --problem P (7-day window)", timed(problem_range, reps)),
        ("history --search TEXT", timed(search, reps)),
        ("history --search TEXT --host H", timed(search_host, reps)),
        ("history --search TEXT --since 30d", timed(search_recent, reps)),
        ("history --search TEXT (7-day window, up to a year ago)", timed(search_window, reps)),
        ("history --search TEXT --host H (30-day window)", timed(search_host_window, reps)),
        ("history --search TEXT --problem P", timed(search_problem, reps)),
        ("history --search TEXT --model M --engine-version V", timed(search_model_version,
                                                                      reps)),
    ]


def measure_only(url: str, args: argparse.Namespace) -> None:
    """Time the queries on a store loaded earlier (`--keep`), without loading again."""
    spool = Path(tempfile.mkdtemp(prefix="inferbot-bench-spool-"))
    settings = Settings(database_url=url, spool_dir=spool)
    engine = get_engine(url)
    with engine.connect() as conn:
        newest = conn.execute(text("SELECT max(created_at) FROM incident_events")).scalar()
        count = conn.execute(text("SELECT count(*) FROM incident_events")).scalar()
    if isinstance(newest, str):  # SQLite text timestamps
        newest = datetime.fromisoformat(newest)
    if newest is None:
        raise SystemExit(f"{url}: no events")
    end = newest.replace(tzinfo=UTC) if newest.tzinfo is None else newest
    print(f"\n== {engine.dialect.name}: {count:,} events (measure only) ==")
    report(settings, end, args)
    dispose_engines()
    shutil.rmtree(spool, ignore_errors=True)


def report(settings: Settings, end: datetime, args: argparse.Namespace) -> None:
    print(f"  {'query':<56} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}  (n={args.reps})")
    for label, (p50, p95, worst) in measure(settings, end, args.reps, args.seed):
        flag = "" if p95 < 50 else "  <-- over 50 ms"
        print(f"  {label:<56} {p50:8.2f} {p95:8.2f} {worst:8.2f}{flag}", flush=True)


def run_engine(name: str, args: argparse.Namespace) -> None:
    print(f"\n== {name}: {args.events:,} events ==", flush=True)
    cleanup: Callable[[], None] = lambda: None  # noqa: E731
    if name == "sqlite":
        own_dir = not args.workdir
        workdir = Path(args.workdir or tempfile.mkdtemp(prefix="inferbot-bench-"))
        db = workdir / "bench.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        url = f"sqlite:///{db}"
        if not args.keep:

            def cleanup() -> None:
                for suffix in ("", "-wal", "-shm", ".migrate-lock"):
                    Path(f"{db}{suffix}").unlink(missing_ok=True)
                if own_dir:
                    shutil.rmtree(workdir, ignore_errors=True)

    else:
        import psycopg

        admin = make_url(args.pg_url)
        dbname = f"inferbot_bench_{os.getpid()}"
        libpq = admin.set(drivername="postgresql").render_as_string(hide_password=False)
        try:
            with psycopg.connect(libpq, autocommit=True, connect_timeout=5) as c:
                c.execute(f'CREATE DATABASE "{dbname}" TEMPLATE template0')
        except psycopg.OperationalError as exc:
            print(f"  skipped: PostgreSQL unreachable at {admin.render_as_string()}: {exc}")
            return
        url = admin.set(drivername="postgresql+psycopg", database=dbname).render_as_string(
            hide_password=False
        )
        if not args.keep:

            def cleanup() -> None:
                dispose_engines()
                with psycopg.connect(libpq, autocommit=True) as c:
                    c.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')

        print(f"  database {dbname}")
    spool = Path(tempfile.mkdtemp(prefix="inferbot-bench-spool-"))
    settings = Settings(database_url=url, spool_dir=spool)
    try:
        upgrade(settings)
        engine = get_engine(url)
        seconds, end = load(engine, args.events, args)
        print(
            f"  bulk write: {args.events:,} events + {args.groups:,} groups in {seconds:.1f} s "
            f"= {args.events / seconds:,.0f} events/s"
        )
        if engine.dialect.name == "sqlite":
            size = sum(
                Path(f"{make_url(url).database}{s}").stat().st_size
                for s in ("", "-wal")
                if Path(f"{make_url(url).database}{s}").exists()
            )
        else:
            with engine.connect() as conn:
                size = int(
                    conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
                )
        print(f"  size on disk: {size / 2**20:,.0f} MiB")
        report(settings, end, args)
    finally:
        dispose_engines()
        cleanup()
        shutil.rmtree(spool, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events to generate")
    parser.add_argument("--groups", type=int, default=20_000, help="incident groups")
    parser.add_argument("--engines", default="sqlite,postgresql", help="comma-separated")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("INFERBOT_TEST_POSTGRES_URL") or DEFAULT_PG,
        help="server to create the scratch database on",
    )
    parser.add_argument("--reps", type=int, default=200, help="timed calls per query")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--workdir", help="where the SQLite file goes (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the databases afterwards")
    parser.add_argument(
        "--measure-only", metavar="URL", help="only time the queries on a store kept earlier"
    )
    args = parser.parse_args()
    if args.measure_only:
        measure_only(args.measure_only, args)
        return
    args.groups = max(1, min(args.groups, args.events))
    for name in args.engines.split(","):
        run_engine(name.strip(), args)


if __name__ == "__main__":
    main()
