"""Slack burst benchmark: 200 signed mentions within 2 s against the real HTTP endpoint.

Starts the fake Slack Web API (tests/slack/fakes.py) and `inferbot serve --http`'s server
in-process on loopback ports, then fires N signed `app_mention` events (default 200), spread
evenly over the burst window (default 2 s), each carrying a fenced vLLM error, so every one is
diagnosed, recorded in a fresh SQLite store, answered in its thread and gets its chart uploaded.
Every tenth mention is also re-delivered as a Slack retry (`X-Slack-Retry-Num: 1`) and as the
`message` twin of the mention, to prove the exactly-once path under load.

Prints the ack latency (p50, p99, max: Slack's limit is 3 s), the reply count per mention
(exactly one "looking" message updated once with the answer), and the time from the first
request to the last reply (and to the last chart, which is rendered after the answers). Exit
status 1 if an ack took 3 s or more or a mention was not answered exactly once.

    python bench/bench_slack.py
    python bench/bench_slack.py --mentions 500 --window 2 --workers 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slack_sdk.signature import SignatureVerifier

from bot.config import Settings
from bot.slack.app import EVENTS_PATH, build, http_server
from tests.slack.fakes import BOT_TOKEN, FakeSlack, load

SECRET = "bench-signing-secret"
# The profile's lines and the error: enough numbers (weights, budget, KV) for a chart, which
# is drawn only when the numbers tell the incident's story.
ERROR = (
    "INFO 11-30 06:03:10 [worker.py:267] the current vLLM instance can use total_gpu_memory "
    "(22.05GiB) x gpu_memory_utilization (0.90) = 19.85GiB\n"
    "INFO 11-30 06:03:10 [worker.py:267] model weights take 14.99GiB; non_torch_memory takes "
    "0.10GiB; PyTorch activation peak memory takes 1.20GiB; the rest of the memory reserved for "
    "KV Cache is 3.56GiB.\n"
    "ERROR 11-30 06:03:16 [core.py:586] ValueError: To serve at least one request with the "
    "model's max seq len (32768), (4.00 GiB KV cache is needed, which is larger than the "
    "available KV cache memory (3.56 GiB). Based on the available memory, the estimated maximum "
    "model length is 29152. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine."
)


def payload(i: int, kind: str = "app_mention") -> bytes:
    body: dict[str, Any] = load("app_mention_code_block.json")
    ts = f"1717200000.{i:06d}"
    body["event"].update(type=kind, ts=ts, event_ts=ts, channel=f"C0BENCH{i % 7:03d}",
                         text=f"<@U0BOT00001> host {i} ```{ERROR}```")
    body["event"].pop("blocks")
    body["event_id"] = f"Ev{kind[:3]}{i:06d}"
    return json.dumps(body).encode()


def post(url: str, body: bytes, retry: bool) -> float:
    stamp = str(int(time.time()))
    headers = {"Content-Type": "application/json", "X-Slack-Request-Timestamp": stamp,
               "X-Slack-Signature": str(SignatureVerifier(SECRET).generate_signature(
                   timestamp=stamp, body=body))}
    if retry:
        headers.update({"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})
    start = time.monotonic()
    with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers),
                                timeout=30) as resp:
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}")
    return time.monotonic() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mentions", type=int, default=200)
    ap.add_argument("--window", type=float, default=2.0, help="burst length in seconds")
    ap.add_argument("--workers", type=int, default=4, help="INFERBOT_WORKERS for the bot")
    ap.add_argument("--timeout", type=float, default=300.0, help="wait for replies at most")
    args = ap.parse_args()

    fake = FakeSlack()
    tmp = tempfile.TemporaryDirectory(prefix="inferbot-bench-slack-")
    settings = Settings(INFERBOT_BOT_TOKEN=BOT_TOKEN, INFERBOT_SIGNING_SECRET=SECRET,
                        slack_api_url=fake.api_url, workers=args.workers,
                        database_url=f"sqlite:///{Path(tmp.name) / 'bench.db'}",
                        spool_dir=Path(tmp.name) / "spool")
    bot = build(settings, http=True)
    server = http_server(bot, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}{EVENTS_PATH}"
    post(url, payload(999_999), retry=False)  # warm-up: KB load, schema, first chart
    fake.recorder.wait_for("files.completeUploadExternal", 2, timeout=120)  # text, chart
    with fake.recorder.cond:
        fake.recorder.calls.clear()

    n = args.mentions
    extra = [i for i in range(n) if i % 10 == 0]
    sends = [(i, "app_mention", False) for i in range(n)]
    sends += [(i, "app_mention", True) for i in extra] + [(i, "message", False) for i in extra]
    spacing = args.window / n
    acks: list[float] = []
    lock = threading.Lock()
    t0 = time.monotonic()

    def fire(k: int, item: tuple[int, str, bool]) -> None:
        i, kind, retry = item
        # originals spread over the window; duplicates just behind their original
        due = t0 + (i * spacing if k < n else i * spacing + 0.05)
        time.sleep(max(0.0, due - time.monotonic()))
        took = post(url, payload(i, kind), retry)
        with lock:
            acks.append(took)

    with ThreadPoolExecutor(max_workers=64) as pool:
        list(pool.map(fire, range(len(sends)), sends))
    sent_in = time.monotonic() - t0

    def charts() -> list[Any]:
        return [c for c in fake.recorder.of("files.completeUploadExternal")
                if "memory budget" in c.args.get("files", "")]

    deadline = time.monotonic() + args.timeout
    while len(charts()) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)  # let any duplicate reply show itself
    posts = Counter(c.args.get("thread_ts") for c in fake.posts())
    updates = fake.recorder.of("chat.update")
    uploaded = charts()
    last = max((c.at for c in updates), default=t0) - t0
    last_chart = max((c.at for c in uploaded), default=t0) - t0
    server.shutdown()
    bot.close()
    fake.close()

    acks.sort()
    p50 = statistics.median(acks)
    p99 = acks[min(len(acks) - 1, int(len(acks) * 0.99))]
    once = len(posts) == n and set(posts.values()) == {1} and len(updates) == n
    print(f"requests: {len(acks)} ({n} mentions in {args.window:g} s + {len(extra)} retries + "
          f"{len(extra)} message twins), all acknowledged {sent_in:.2f} s after the first; "
          f"bot workers {args.workers}")
    print(f"ack latency: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
          f"max {acks[-1] * 1000:.1f} ms (limit 3000 ms)")
    print(f"replies: {len(posts)} threads answered, {sum(posts.values())} messages posted, "
          f"{len(updates)} answers, {len(uploaded)} charts; exactly once: "
          f"{'yes' if once else 'NO'}")
    print(f"time to the last reply: {last:.1f} s after the first request "
          f"(last chart: {last_chart:.1f} s)")
    tmp.cleanup()
    return 0 if once and acks[-1] < 3.0 else 1


if __name__ == "__main__":
    sys.exit(main())
