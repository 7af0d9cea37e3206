"""The hostile clients and the lying worker of the fault cases: slowloris connections (an
unfinished request head, held open), stalled uploads (a large body that stops arriving), and a
worker front whose server info advertises a small KV capacity while its event stream is a real,
much larger mock's (the event flood of issue 12, finding 6); connection floods (slow or idle,
reopened when closed) and a health prober for connection pressure (issue 25, item 1)."""

from __future__ import annotations

import http.client
import http.server
import json
import resource
import select
import socket
import threading
import time
from urllib.parse import urlsplit


def raise_nofile(want: int) -> None:
    """Lets this harness hold `want` sockets (soft limit up to the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _addr(url: str) -> tuple[str, int]:
    u = urlsplit(url)
    return u.hostname or "127.0.0.1", u.port or 80


class Slowloris:
    """`n` connections that each send the start of a request head and then nothing."""

    def __init__(self, url: str, n: int):
        self.socks: list[socket.socket] = []
        self.connect_failed = 0
        host, port = _addr(url)
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(0.5)
            try:
                s.connect((host, port))
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
                s.setblocking(False)
                self.socks.append(s)
            except OSError:
                self.connect_failed += 1
                s.close()

    def closed_by_peer(self) -> int:
        """How many of the held connections the router has closed (EOF or reset)."""
        closed = 0
        for s in self.socks:
            if s.fileno() < 0:
                closed += 1
                continue
            r, _, _ = select.select([s], [], [], 0)
            if r:
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    closed += 1
                    s.close()
        return closed

    def close(self) -> None:
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass


class StalledUpload(threading.Thread):
    """POST /generate announcing `length` bytes, sends `send` of them, then waits for an answer."""

    def __init__(self, url: str, length: int, send: int, wait_s: float):
        super().__init__(daemon=True)
        self.url, self.length, self.send, self.wait_s = url, length, send, wait_s
        self.status: int | None = None
        self.sent = 0
        self.answered_after_s: float | None = None

    def run(self) -> None:
        host, port = _addr(self.url)
        t0 = time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=self.wait_s) as s:
                s.sendall(f"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {self.length}\r\n\r\n".encode())
                chunk = b"[" + b"1," * (1 << 19)  # 1 MiB of a JSON array that never ends
                while self.sent < self.send:
                    part = chunk[: min(len(chunk), self.send - self.sent)]
                    s.sendall(part)
                    self.sent += len(part)
                head = s.recv(64)
                self.answered_after_s = round(time.monotonic() - t0, 3)
                parts = head.split(b" ", 2)
                if len(parts) >= 2 and parts[1].isdigit():
                    self.status = int(parts[1])
        except OSError:
            # The router may answer and close while we still send (413 from content-length).
            self.answered_after_s = round(time.monotonic() - t0, 3)
            if self.status is None:
                self.status = 0


class CappedFront:
    """An HTTP front for a real mock: every call is forwarded, but `/server_info` and
    `/get_server_info` advertise `max_total_num_tokens = capacity`. The router registers the
    front's URL and subscribes to the mock's ZMQ events (the endpoint in the forwarded info)."""

    def __init__(self, upstream: str, capacity: int):
        self.upstream, self.capacity = upstream, capacity
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection, body ends at close

            def log_message(self, *_args) -> None:
                pass

            def _forward(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                host, port = _addr(front.upstream)
                conn = http.client.HTTPConnection(host, port, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in ("host", "connection", "content-length")}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    r = conn.getresponse()
                    path = self.path.split("?", 1)[0]
                    if path in ("/server_info", "/get_server_info") and r.status == 200:
                        data = front._rewrite(r.read())
                        self.send_response(r.status)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    self.send_response(r.status)
                    for k, v in r.getheaders():
                        if k.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                            self.send_header(k, v)
                    self.end_headers()
                    while True:
                        chunk = r.read1(65536)
                        if not chunk:
                            break
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except OSError:
                    self.close_connection = True
                finally:
                    conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _rewrite(self, raw: bytes) -> bytes:
        try:
            info = json.loads(raw)
        except ValueError:
            return raw
        if isinstance(info, dict):
            info["max_total_num_tokens"] = self.capacity
        return json.dumps(info).encode()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ConnFlood(threading.Thread):
    """Keeps `n` connections to `url` open. `kind` "slow": each sends the start of a request
    head and nothing more (slowloris); "idle": each sends one complete keep-alive request, reads
    its answer and then sits idle (a client's oversized pool). With `reopen`, a connection the
    router closes is opened again at once (an attacker keeping up the pressure); without, it
    stays closed."""

    def __init__(self, url: str, n: int, kind: str, reopen: bool):
        super().__init__(daemon=True)
        self.addr, self.n, self.kind, self.reopen = _addr(url), n, kind, reopen
        self.opened = 0
        self.closed_by_peer = 0
        self.connect_failed = 0
        self.ready = threading.Event()
        self._halt = threading.Event()
        self._socks: list[socket.socket] = []

    def _open(self) -> socket.socket | None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(self.addr)
            if self.kind == "slow":
                s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\n")
            else:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                if not s.recv(4096):
                    raise OSError("closed before answering")
            s.setblocking(False)
            self.opened += 1
            return s
        except OSError:
            self.connect_failed += 1
            s.close()
            return None

    def open_count(self) -> int:
        return len(self._socks)

    def run(self) -> None:
        for _ in range(self.n):
            if self._halt.is_set():
                break
            s = self._open()
            if s is not None:
                self._socks.append(s)
        self.ready.set()
        while not self._halt.is_set():
            if not self._socks:
                time.sleep(0.05)
                continue
            readable, _, _ = select.select(self._socks, [], [], 0.05)
            for s in readable:
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if data:
                    continue
                self.closed_by_peer += 1
                self._socks.remove(s)
                s.close()
                if self.reopen and not self._halt.is_set():
                    again = self._open()
                    if again is not None:
                        self._socks.append(again)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass


class Prober(threading.Thread):
    """GET `path` on a new connection every `every_s` (as a kubelet probes), recording each
    answer's latency (a failure or timeout counts as `timeout_s`)."""

    def __init__(self, url: str, path: str = "/health", every_s: float = 0.1, timeout_s: float = 10.0):
        super().__init__(daemon=True)
        self.url, self.path, self.every_s, self.timeout_s = url, path, every_s, timeout_s
        self.latencies: list[float] = []
        self.failed = 0
        self._halt = threading.Event()

    def run(self) -> None:
        from kvcompare import httpc
        while not self._halt.is_set():
            t0 = time.monotonic()
            status = httpc.request("GET", self.url + self.path, timeout=self.timeout_s)[0]
            took = time.monotonic() - t0
            if status != 200:
                self.failed += 1
                took = max(took, self.timeout_s)
            self.latencies.append(took)
            self._halt.wait(max(0.0, self.every_s - took))

    def stop(self) -> None:
        self._halt.set()
        self.join(self.timeout_s + 5)
