"""Local stand-ins for Slack: the Web API over HTTP and the Socket Mode WebSocket server.

`FakeSlack` answers the Web API methods the bot calls with the recorded responses in
data/web_api_responses.json, records every call (method, auth header, parsed arguments, raw
bytes), serves snippet files only to `Bearer xoxb-...` (Slack sends an HTML sign-in page
otherwise), accepts the upload POST of the three-step file upload, receives response_url posts,
and injects 429s with Retry-After on demand.

`FakeSocketMode` is a minimal RFC 6455 server (standard library only): it sends `hello`, then
queued envelopes, and records the acks the app sends back.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

DATA = Path(__file__).parent / "data"
RESPONSES: dict[str, Any] = json.loads((DATA / "web_api_responses.json").read_text())
BOT_TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-1-test"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name).read_text())
    return data


@dataclass
class Call:
    method: str
    auth: str
    args: dict[str, Any]
    raw: bytes
    headers: dict[str, str] = field(default_factory=dict)
    at: float = field(default_factory=time.monotonic)
    response: dict[str, Any] = field(default_factory=dict)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.cond = threading.Condition()

    def add(self, call: Call) -> None:
        with self.cond:
            self.calls.append(call)
            self.cond.notify_all()

    def of(self, method: str) -> list[Call]:
        with self.cond:
            return [c for c in self.calls if c.method == method]

    def settle(self, quiet: float = 0.3, timeout: float = 15.0) -> None:
        """Wait until no call has arrived for `quiet` seconds (the bot's work has finished)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.cond:
                last = self.calls[-1].at if self.calls else 0.0
            if time.monotonic() - last >= quiet:
                return
            time.sleep(quiet / 3)

    def wait_for(self, method: str, count: int = 1, timeout: float = 15.0) -> list[Call]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = [c for c in self.calls if c.method == method]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    names = [c.method for c in self.calls]
                    raise AssertionError(f"waited for {count} x {method}; calls: {names}")
                self.cond.wait(left)


class FakeSlack:
    def __init__(self) -> None:
        self.recorder = Recorder()
        self.files: dict[str, bytes] = {}
        self.fail_next: dict[str, int] = {}
        self.usergroups: dict[str, list[str]] = {}
        self.ws_url = ""
        # Slack's "about one message per second per channel": a chat.postMessage to a channel
        # sooner than this after the last one it accepted there gets 429 (0: no limit)
        self.channel_window_s = 0.0
        self._last_post: dict[str, float] = {}
        self._ts = itertools.count(1)
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake.handle(self, b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                fake.handle(self, self.rfile.read(length))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{self.base}/api/"
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ----- helpers for tests

    def file_url(self, file_id: str) -> str:
        return f"{self.base}/files-pri/T0TEAM0001-{file_id}/download/untitled"

    def response_url(self, name: str = "r1") -> str:
        return f"{self.base}/response/{name}"

    def posts(self) -> list[Call]:
        """The messages posted and still standing (a placeholder may be deleted again)."""
        deleted = {(c.args.get("channel"), c.args.get("ts"))
                   for c in self.recorder.of("chat.delete")}
        return [c for c in self.recorder.of("chat.postMessage")
                if (c.args.get("channel"), c.response.get("ts")) not in deleted]

    # ----- the server side

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str,
              headers: dict[str, str] | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)

    def _json(self, h: BaseHTTPRequestHandler, data: dict[str, Any], status: int = 200,
              headers: dict[str, str] | None = None) -> None:
        self._send(h, status, json.dumps(data).encode(), "application/json; charset=utf-8",
                   headers)

    def handle(self, h: BaseHTTPRequestHandler, raw: bytes) -> None:
        parts = urlsplit(h.path)
        path = parts.path
        auth = h.headers.get("Authorization", "")
        headers = {k.lower(): v for k, v in h.headers.items()}
        # The upload target gets raw bytes labelled as a form: route it before parsing.
        if path.startswith("/upload/"):
            self.recorder.add(Call("upload", auth, {"path": path}, raw, headers))
            self._send(h, 200, f"OK - {len(raw)}".encode(), "text/plain")
            return
        if path.startswith("/files-redirect/"):
            target = parse_qs(parts.query)["to"][0]
            self.recorder.add(Call("file.redirect", auth, {"to": target}, b"", headers))
            self._send(h, 302, b"", "text/plain", {"Location": target})
            return
        if path.startswith("/files-pri/"):
            self.recorder.add(Call("file.download", auth, {"path": path}, b"", headers))
            file_id = path.split("/")[2].split("-", 1)[1]
            if auth != f"Bearer {BOT_TOKEN}":
                self._send(h, 200, b"<!DOCTYPE html><html><body>Sign in</body></html>",
                           "text/html; charset=utf-8")
                return
            self._send(h, 200, self.files.get(file_id, b""), "text/plain; charset=utf-8")
            return
        if path.startswith("/response/"):
            self.recorder.add(Call("response_url", auth, json.loads(raw or b"{}"), raw, headers))
            self._send(h, 200, b"ok", "text/plain")
            return
        if not path.startswith("/api/"):
            self._send(h, 404, b"not found", "text/plain")
            return
        method = path[len("/api/"):]
        args = self._args(h, parts.query, raw)
        with self._lock:
            failing = self.fail_next.get(method, 0)
            if failing:
                self.fail_next[method] = failing - 1
            elif method == "chat.postMessage" and self.channel_window_s:
                channel, now = str(args.get("channel")), time.monotonic()
                # (a little slack for timer jitter between the bot's clock and this one)
                if now - self._last_post.get(channel, -1e9) < self.channel_window_s * 0.9:
                    failing = 1
                else:
                    self._last_post[channel] = now
        if failing:
            self.recorder.add(Call(f"{method}#429", auth, args, raw, headers))
            limited = RESPONSES["error_ratelimited_http429"]
            self._json(h, limited["body"], 429, limited["_headers"])
            return
        answer = self._answer(method, args)
        self.recorder.add(Call(method, auth, args, raw, headers, response=answer))
        self._json(h, answer)

    @staticmethod
    def _args(h: BaseHTTPRequestHandler, query: str, raw: bytes) -> dict[str, Any]:
        ctype = h.headers.get("Content-Type", "")
        args: dict[str, Any] = {k: v[0] for k, v in parse_qs(query).items()}
        if "json" in ctype and raw:
            args.update(json.loads(raw))
        elif raw:
            args.update({k: v[0] for k, v in parse_qs(raw.decode()).items()})
        return args

    def _answer(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if method == "auth.test":
            return dict(RESPONSES["auth.test"])
        if method == "chat.postMessage":
            ts = f"1717180000.{next(self._ts):06d}"
            body = dict(RESPONSES["chat.postMessage"])
            body.update(ts=ts, channel=args.get("channel"))
            return body
        if method == "chat.update":
            return {"ok": True, "channel": args.get("channel"), "ts": args.get("ts")}
        if method == "chat.getPermalink":
            ts = str(args.get("message_ts", "")).replace(".", "")
            return {"ok": True, "channel": args.get("channel"),
                    "permalink": f"https://example.slack.com/archives/{args.get('channel')}/p{ts}"}
        if method == "chat.postEphemeral":
            return dict(RESPONSES["chat.postEphemeral"])
        if method == "files.getUploadURLExternal":
            file_id = f"F0CHART{next(self._ts):04d}"
            return {"ok": True, "upload_url": f"{self.base}/upload/v1/{file_id}",
                    "file_id": file_id}
        if method == "files.completeUploadExternal":
            files = json.loads(args.get("files", "[]"))
            return {"ok": True, "files": [{"id": f["id"], "title": f.get("title", "")}
                                          for f in files]}
        if method == "files.info":
            info = json.loads(json.dumps(RESPONSES["files.info_snippet"]))
            file_id = args.get("file", "F0SNIPPET01")
            info["file"].update(id=file_id, url_private=self.file_url(file_id),
                                url_private_download=self.file_url(file_id))
            return dict(info)
        if method == "usergroups.users.list":
            group = args.get("usergroup", "")
            if group not in self.usergroups:
                return dict(RESPONSES["usergroups.users.list_error"])
            return {"ok": True, "users": self.usergroups[group]}
        if method == "apps.connections.open":
            return {"ok": True, "url": self.ws_url}
        return {"ok": True}


# --------------------------------------------------------------------------- Socket Mode

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _frame(payload: bytes, opcode: int = 0x1) -> bytes:
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


def _read_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _read_frame(conn: socket.socket) -> tuple[int, bytes]:
    b1, b2 = _read_exact(conn, 2)
    opcode, masked, n = b1 & 0x0F, b2 & 0x80, b2 & 0x7F
    if n == 126:
        n = struct.unpack("!H", _read_exact(conn, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", _read_exact(conn, 8))[0]
    mask = _read_exact(conn, 4) if masked else b"\0\0\0\0"
    data = bytes(b ^ mask[i % 4] for i, b in enumerate(_read_exact(conn, n)))
    return opcode, data


class FakeSocketMode:
    """Accepts WebSocket clients; sends each hello, then each queued envelope. `send` delivers
    an envelope to the newest connection, `drop` cuts every connection (a network failure:
    no close frame)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"ws://127.0.0.1:{self.port}/link/?ticket=test"
        self.envelopes: list[dict[str, Any]] = []
        self.acks: list[dict[str, Any]] = []
        self.request_lines: list[str] = []
        self.conns: list[socket.socket] = []
        self.cond = threading.Condition()
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def send(self, envelope: dict[str, Any]) -> None:
        with self.cond:
            self.conns[-1].sendall(_frame(json.dumps(envelope).encode()))

    def drop(self) -> None:
        with self.cond:
            for conn in self.conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self.conns.clear()

    def wait_for_connections(self, count: int, timeout: float = 30.0) -> None:
        """Until `count` connections have said hello since the server started."""
        self._wait_until(self.request_lines, count, timeout, "connections")

    def _wait_until(self, seen: list[Any], count: int, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(seen) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(seen)} of {count} {what}")
                self.cond.wait(left)

    def close(self) -> None:
        self._stop = True
        self.sock.close()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        try:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096)
            lines = request.decode().split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, v in
                       (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
            accept = base64.b64encode(hashlib.sha1(
                (headers["sec-websocket-key"] + _GUID).encode()).digest()).decode()
            conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                          f"Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
                          ).encode())
            with self.cond:
                conn.sendall(_frame(json.dumps(RESPONSES["socket_mode_hello"]).encode()))
                for envelope in self.envelopes:
                    conn.sendall(_frame(json.dumps(envelope).encode()))
                self.conns.append(conn)
                self.request_lines.append(lines[0])
                self.cond.notify_all()
            while not self._stop:
                opcode, data = _read_frame(conn)
                if opcode == 0x9:  # ping -> pong
                    conn.sendall(_frame(data, 0xA))
                elif opcode == 0x8:
                    return
                elif opcode == 0x1:
                    with self.cond:
                        self.acks.append(json.loads(data))
                        self.cond.notify_all()
        except (ConnectionError, OSError):
            return
        finally:
            conn.close()

    def wait_for_acks(self, count: int, timeout: float = 15.0) -> list[dict[str, Any]]:
        self._wait_until(self.acks, count, timeout, "acks from the app")
        with self.cond:
            return list(self.acks)
