"""The HTTP endpoint under hostile load, as `inferbot serve --http` (a real process, so its
memory and threads can be read): bodies past the limit, half-sent requests, trickling clients,
malformed requests, and a burst of signed mentions."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from subprocess import Popen
from urllib.parse import urlsplit

import pytest
from slack_sdk.signature import SignatureVerifier

from tests.fixtures.slack import SECRET, Endpoint, make_settings, serve_env, serve_process, serving
from tests.slack.fakes import FakeSlack
from tests.slack.test_http import VLLM_ERROR, mention

pytestmark = [pytest.mark.slack, pytest.mark.slow]
IDLE_S = 3


@pytest.fixture
def served(fake: FakeSlack, tmp_path: Path) -> Iterator[tuple[Endpoint, Popen[str], Path]]:
    log = tmp_path / "serve.log"
    env = serve_env(fake, tmp_path, INFERBOT_HTTP_IDLE_TIMEOUT_S=str(IDLE_S),
                    INFERBOT_HTTP_REQUEST_TIMEOUT_S=str(IDLE_S), INFERBOT_LOG_FORMAT="json",
                    INFERBOT_SPOOL_DIR=str(tmp_path / "spool"))
    with serve_process(env, fake, stderr=log) as (endpoint, proc):
        yield endpoint, proc, log


def status(pid: int, field: str) -> int:
    """A figure of /proc/PID/status (VmHWM: peak resident memory in kB; Threads)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field}")


def connect(endpoint: Endpoint) -> socket.socket:
    url = urlsplit(endpoint.url)
    return socket.create_connection((url.hostname or "", url.port or 80), timeout=30)


def head(extra: str) -> bytes:
    return (f"POST /slack/events HTTP/1.1\r\nHost: inferbot\r\n"
            f"Content-Type: application/json\r\n{extra}\r\n").encode()


def response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def assert_clean_log(log: Path) -> None:
    """JSON lines only, no traceback, no payload."""
    for line in log.read_text().splitlines():
        record = json.loads(line)
        assert "exc" not in record and "Traceback" not in line, line


def test_a_400_mb_unsigned_post_is_413_before_it_is_read(
        served: tuple[Endpoint, Popen[str], Path]) -> None:
    endpoint, proc, log = served
    before = status(proc.pid, "VmHWM")
    size = 400 * 1024 * 1024
    sock = connect(endpoint)
    sock.sendall(head(f"Content-Length: {size}\r\n"))
    answer = response(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:80]
    sent, block = 0, b"x" * (1024 * 1024)
    try:  # the rest of the body finds the connection closed: it was never read
        while sent < size:
            sent += sock.send(block)
    except OSError:
        pass
    sock.close()
    assert sent < size
    # the same with no Content-Length: a chunked body is cut once it passes the limit
    sock = connect(endpoint)
    sock.sendall(head("Transfer-Encoding: chunked\r\n"))
    chunk = b"%x\r\n%s\r\n" % (len(block), block)
    answer, sent = b"", 0
    try:
        while sent < size and not answer:
            sent += sock.send(chunk)
            if select.select([sock], [], [], 0)[0]:
                answer = response(sock)
    except OSError:
        answer = answer or response(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:80]
    peak_mb = status(proc.pid, "VmHWM") / 1024
    print(f"\nserver peak memory: {before / 1024:.0f} MB before, {peak_mb:.0f} MB after "
          f"a 400 MB POST (Content-Length) and a chunked one ({sent / 2**20:.0f} MB sent)")
    assert peak_mb < 100
    assert endpoint.event(mention("help"))[0] == 200  # still answering
    assert_clean_log(log)


def test_half_sent_requests_hold_no_thread_and_are_closed_within_the_idle_timeout(
        served: tuple[Endpoint, Popen[str], Path]) -> None:
    endpoint, proc, log = served
    threads_before = status(proc.pid, "Threads")
    socks = [connect(endpoint) for _ in range(300)]
    for sock in socks:
        sock.sendall(head("Content-Length: 500\r\n") + b'{"type": "event_')
    idle_from = time.monotonic()
    # a signed request still gets through at once: nothing waits for the half-sent ones
    code, _, took = endpoint.event(mention("help"))
    assert code == 200 and took < 3
    # (the mention's own work starts a few threads; a thread per connection would be 300)
    assert status(proc.pid, "Threads") <= threads_before + 8
    closed: list[float] = []
    for sock in socks:  # each read returns at the close (EOF), or later for a later socket
        sock.settimeout(IDLE_S + 10)
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(100) == b""
        closed.append(time.monotonic() - idle_from)
        sock.close()
    print(f"\n300 half-sent requests: all closed {max(closed):.1f} s after they went idle "
          f"(idle timeout {IDLE_S} s); threads {threads_before} -> "
          f"{status(proc.pid, 'Threads')}")
    assert max(closed) <= IDLE_S + 1.0
    assert_clean_log(log)


def test_a_trickling_client_is_cut_at_the_request_timeout(
        served: tuple[Endpoint, Popen[str], Path]) -> None:
    endpoint, _, _ = served
    sock = connect(endpoint)
    start = time.monotonic()
    request = head("Content-Length: 500\r\n") + b"{" * 500
    closed_at = None
    for byte in request:  # one byte every 0.5 s: never idle, never done
        try:
            sock.send(bytes([byte]))
        except OSError:
            closed_at = time.monotonic() - start
            break
        if select.select([sock], [], [], 0.5)[0] and sock.recv(100) == b"":
            closed_at = time.monotonic() - start
            break
    sock.close()
    assert closed_at is not None and closed_at <= IDLE_S + 2.5, closed_at


@pytest.mark.parametrize(("body", "headers", "expected"), [
    ("\u00ff not json".encode(), {}, "400"),
    (b'["a list"]', {}, "400"),
    (b"payload=%7Bnot", {"Content-Type": "application/x-www-form-urlencoded"}, "400"),
    (b"x" * 5000, {"X-Slack-Request-Timestamp": "soon"}, "400"),
    (b"{}", {"X-Slack-Request-Timestamp": "1e9"}, "400"),
    (b"{not json", {"X-Slack-Signature": "v0=00"}, "401"),
    (b"\xff\xfe not utf-8", {"X-Slack-Signature": "v0=00"}, "400"),
], ids=["not-json", "list", "form-payload", "timestamp-word", "timestamp-float",
        "unsigned-garbage", "unsigned-binary"])
def test_malformed_requests_get_one_line_and_never_500(
        served: tuple[Endpoint, Popen[str], Path], body: bytes, headers: dict[str, str],
        expected: str) -> None:
    endpoint, _, log = served
    sock = connect(endpoint)
    stamp = headers.get("X-Slack-Request-Timestamp", str(int(time.time())))
    try:
        signature = SignatureVerifier(SECRET).generate_signature(timestamp=stamp, body=body)
    except UnicodeDecodeError:
        signature = ""
    fields = {"Content-Type": "application/json", "X-Slack-Request-Timestamp": stamp,
              "X-Slack-Signature": signature or "", "Content-Length": str(len(body)),
              "Connection": "close", **headers}
    sock.sendall(b"POST /slack/events HTTP/1.1\r\nHost: inferbot\r\n"
                 + "".join(f"{k}: {v}\r\n" for k, v in fields.items()).encode() + b"\r\n"
                 + body)
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    sock.close()
    top, _, text = answer.partition(b"\r\n\r\n")
    assert top.split()[1].decode() == expected, answer
    assert len(text.decode().strip().splitlines()) == 1, text
    time.sleep(0.2)
    assert_clean_log(log)
    assert "not json" not in log.read_text() and "xxxxx" not in log.read_text()


def test_a_burst_of_500_signed_mentions_is_acked_in_time_and_answered_once_each(
        served: tuple[Endpoint, Popen[str], Path], fake: FakeSlack) -> None:
    endpoint, proc, log = served
    events = []
    for i in range(500):
        event = mention(f"```{VLLM_ERROR}```", ts=f"1717180{i:03d}.000100",
                        event_id=f"Ev0BURST{i:04d}")
        event["event"]["channel"] = f"C0BURST{i:04d}"
        events.append(event)
    barrier = threading.Barrier(100)

    def send(event: dict[str, object]) -> tuple[int, float]:
        barrier.wait() if int(str(event["event_id"])[-4:]) < 100 else None
        code, _, took = endpoint.event(event)
        return code, took

    with ThreadPoolExecutor(max_workers=500) as pool:
        results = list(pool.map(send, events))
    acks = sorted(took for _, took in results)
    assert all(code == 200 for code, _ in results)
    start = time.monotonic()
    fake.recorder.wait_for("chat.update", 500, timeout=600)
    answered_s = time.monotonic() - start
    # the charts follow the answers (and SIGTERM waits for them): let them finish
    fake.recorder.wait_for("files.completeUploadExternal", 500, timeout=600)
    fake.recorder.settle(quiet=1.0, timeout=60)
    per_thread: dict[str, int] = {}
    for call in fake.recorder.of("chat.update"):
        per_thread[call.args["channel"]] = per_thread.get(call.args["channel"], 0) + 1
    print(f"\n500 signed mentions: slowest ack {acks[-1]:.2f} s, median {acks[250]:.2f} s; "
          f"all answered {answered_s:.0f} s after the last ack; peak memory "
          f"{status(proc.pid, 'VmHWM') / 1024:.0f} MB")
    assert acks[-1] < 3
    assert len(per_thread) == 500 and set(per_thread.values()) == {1}
    assert_clean_log(log)


def test_a_full_work_queue_tells_the_user_to_retry(fake: FakeSlack, tmp_path: Path) -> None:
    from bot.slack.handlers import BUSY

    settings = make_settings(fake, tmp_path, workers=1, work_queue=1)
    events = [mention(f"```{VLLM_ERROR}```", ts=f"1717190{i:03d}.000100",
                      event_id=f"Ev0FULL{i:04d}") for i in range(30)]
    with serving(settings, fake) as endpoint, ThreadPoolExecutor(max_workers=30) as pool:
        acks = list(pool.map(lambda e: endpoint.event(e), events))
        assert all(code == 200 and took < 3 for code, _, took in acks)
        fake.recorder.settle(quiet=2.0, timeout=120)
    busy = [c for c in fake.recorder.of("chat.postMessage") if c.args.get("text") == BUSY]
    answered = fake.recorder.of("chat.update")
    assert busy and answered
    threads = {c.args["thread_ts"] for c in busy} | {
        c.args["thread_ts"] for c in fake.recorder.of("chat.postMessage")
        if c.args.get("text") != BUSY}
    assert len(threads) == 30  # each mention got the answer or the request to retry
    assert len(busy) + len(answered) == 30
