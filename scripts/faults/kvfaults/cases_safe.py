"""Fault cases of issue 25, items 4-6, each under load with the router's shipped defaults
(no health or timeout flags):

- `urls`: every spelling of the metadata address (IPv4-mapped, IPv4-compatible and NAT64 IPv6,
  hex / octal / one-number IPv4) is refused at once by `POST /workers`, and four other spellings
  of a registered worker answer "already registered"; the fleet stays as it was.
- `headers`: a client's Cookie, Authorization, SGLang `x-override-rid` and a header its
  `Connection:` names never reach the worker, `X-Forwarded-For` gets the client appended, and
  a header the worker's `Connection:` names never reaches the client.
- `squat`: a worker is killed and another process (a second mock) binds its KV event ports and
  publishes its own stores: none of them enters the dead worker's index.
"""

from __future__ import annotations

import http.client
import http.server
import json
import threading
import time

from kvcompare import httpc, prom

from . import attacks
from .caselib import Ctx, _stop, finish, fleet, load, wait_in_flight
from .rig import Mock, Router, poll_until

METADATA_SPELLINGS = (
    "http://[::ffff:169.254.169.254]/", "http://[::ffff:a9fe:a9fe]:80", "http://[::169.254.169.254]",
    "http://[64:ff9b::a9fe:a9fe]", "http://[64:ff9b:1:a9fe:a9:fe00::]", "http://0xa9fea9fe/",
    "http://0251.0376.0251.0376", "http://2852039166", "http://169.254.169.254",
)


def _workers(router: Router) -> list[dict]:
    j = httpc.get_json(router.url + "/workers", timeout=5) or {}
    return j.get("workers", []) if isinstance(j, dict) else []


def case_url_safety(ctx: Ctx) -> dict:
    row = {"case": "worker URL spellings (shipped defaults)",
           "fault": f"POST /workers with {len(METADATA_SPELLINGS)} spellings of 169.254.169.254 and 4 other "
                    f"spellings of a registered worker, under load"}
    mocks = fleet(ctx, "urls")
    router = None
    try:
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / "urls" / "router.log")
        m0 = router.metrics()
        ld = load(ctx, router, "urls")
        wait_in_flight(ctx, ld, lambda: True, frac=0.2)
        fault = ld.now()
        accepted = []
        for url in METADATA_SPELLINGS:
            status, body = httpc.request("POST", router.url + "/workers", {"url": url}, timeout=5)
            if not (400 <= status < 500 and b"link-local" in body):
                accepted.append(f"{url} -> {status}")
        port = mocks[0].port
        duplicated = []
        for url in (f"http://localhost:{port}/", f"http://[::ffff:127.0.0.1]:{port}", f"http://0.0.0.0:{port}",
                    f"http://LOCALHOST.:{port}"):
            status, body = httpc.request("POST", router.url + "/workers", {"url": url}, timeout=5)
            if status >= 300 or b"already registered" not in body:
                duplicated.append(f"{url} -> {status} {body[:120]!r}")
        row["metadata_spellings_accepted"] = accepted
        row["duplicate_spellings_registered"] = duplicated
        row = finish(row, ctx, ld, router, m0, fault)
        registered = len(_workers(router))
        row["workers_after"] = registered
        if accepted:
            row["violations"].append(f"metadata address spellings accepted: {accepted}")
        if duplicated:
            row["violations"].append(f"spellings of one worker not answered as duplicates: {duplicated}")
        if registered != len(mocks):
            row["violations"].append(f"{registered} workers registered, expected {len(mocks)}")
        return row
    finally:
        _stop(router, mocks)


class RecordingFront:
    """An HTTP front for a real mock that records the request headers of every data-plane call
    and answers with `Connection: x-worker-hop` plus the header `X-Worker-Hop` it names."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.heads: list[dict[str, str]] = []
        self.lock = threading.Lock()
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *_args) -> None:
                pass

            def _forward(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                path = self.path.split("?", 1)[0]
                if path in ("/generate", "/v1/completions", "/v1/chat/completions"):
                    with front.lock:
                        front.heads.append({k.lower(): v for k, v in self.headers.items()})
                host, port = attacks._addr(front.upstream)
                conn = http.client.HTTPConnection(host, port, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() in ("content-type", "accept")}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    r = conn.getresponse()
                    data = r.read()
                    self.send_response(r.status)
                    for k, v in r.getheaders():
                        if k.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                            self.send_header(k, v)
                    self.send_header("Connection", "x-worker-hop")
                    self.send_header("X-Worker-Hop", "1")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    self.close_connection = True
                finally:
                    conn.close()

            do_GET = do_POST = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def head_with(self, request_id: str) -> dict[str, str] | None:
        with self.lock:
            return next((h for h in self.heads if h.get("x-request-id") == request_id), None)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _send_with_client_headers(router_url: str, request_id: str) -> tuple[int, dict[str, str]]:
    host, port = attacks._addr(router_url)
    conn = http.client.HTTPConnection(host, port, timeout=60)
    body = json.dumps({"text": f"headers probe {request_id}", "sampling_params": {"max_new_tokens": 2}}).encode()
    try:
        conn.putrequest("POST", "/generate")
        for k, v in (("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                     ("Cookie", "session=faults"), ("Authorization", "Bearer client-secret"),
                     ("X-Override-Rid", "victim-1"), ("Connection", "x-client-hop"), ("X-Client-Hop", "1"),
                     ("X-Forwarded-For", "203.0.113.7"), ("X-Request-Id", request_id)):
            conn.putheader(k, v)
        conn.endheaders(body)
        r = conn.getresponse()
        r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}
    finally:
        conn.close()


def case_headers(ctx: Ctx) -> dict:
    row = {"case": "client and worker headers (shipped defaults)",
           "fault": "requests with Cookie, Authorization, x-override-rid, a Connection-named header and a "
                    "forged X-Forwarded-For; the worker answers with a Connection-named header"}
    mocks = fleet(ctx, "headers")
    front = RecordingFront(mocks[0].url)
    router = None
    try:
        router = Router(ctx.b("router"), [front.url] + [m.url for m in mocks[1:]],
                        ctx.out / "logs" / "headers" / "router.log")
        m0 = router.metrics()
        ld = load(ctx, router, "headers")
        wait_in_flight(ctx, ld, lambda: True, frac=0.2)
        fault = ld.now()
        reached, leaked_back, seen = [], [], 0
        # Where a probe goes is the router's choice (by load, identical prompts together): send
        # distinct probes until 3 have reached the front (9 fixed probes once all missed it).
        for i in range(20 * len(mocks)):
            if seen >= 3:
                break
            rid = f"faults-headers-{i}"
            status, resp_headers = _send_with_client_headers(router.url, rid)
            if "x-worker-hop" in resp_headers:
                leaked_back.append(rid)
            head = front.head_with(rid)
            if head is None:
                continue
            seen += 1
            for name in ("cookie", "authorization", "x-override-rid", "x-client-hop"):
                if name in head:
                    reached.append(name)
            if head.get("x-forwarded-for") != "203.0.113.7, 127.0.0.1":
                reached.append(f"x-forwarded-for={head.get('x-forwarded-for')!r}")
        row["probes_at_recorded_worker"] = seen
        row = finish(row, ctx, ld, router, m0, fault)
        if not seen:
            row["violations"].append("no probe request reached the recording worker")
        if reached:
            row["violations"].append(f"client headers reached the worker: {sorted(set(reached))}")
        if leaked_back:
            row["violations"].append(f"a Connection-named worker header reached the client ({len(leaked_back)})")
        return row
    finally:
        _stop(router, mocks)
        front.stop()


class Squatter(Mock):
    """A second mock on its own HTTP port that binds a dead worker's KV event ports."""

    def __init__(self, bin_path, victim: Mock, log_dir, speedup: float):
        self.victim_ports = (victim.zmq_port, victim.replay_port)
        super().__init__(bin_path, "squatter", log_dir, speedup)

    def argv(self) -> list[str]:
        self.zmq_port, self.replay_port = self.victim_ports
        return super().argv()


def case_squatted_event_port(ctx: Ctx) -> dict:
    row = {"case": "dead worker's event port squatted (shipped defaults)",
           "fault": "SIGKILL one mock; a second mock binds its ZMQ event and replay ports and stores its own "
                    "prompts"}
    mocks = fleet(ctx, "squat")
    victim = mocks[0]
    router = squatter = None
    try:
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / "squat" / "router.log")
        m0 = router.metrics()
        ld = load(ctx, router, "squat")
        wait_in_flight(ctx, ld, lambda: router.unit_blocks(victim.url) > 0, frac=0.2, timeout=30)
        victim.kill()
        fault = ld.now()
        before = router.unit_blocks(victim.url)
        squatter = Squatter(ctx.b("sglang-mock"), victim, ctx.out / "logs" / "squat", 0)

        def untrusted() -> float:
            return prom.total(router.metrics(), "kvrouter_kv_events_untrusted_total")

        u0 = untrusted()
        i = 0

        def fed() -> bool:
            nonlocal i
            i += 1
            httpc.request("POST", squatter.url + "/generate",
                          {"text": f"squatter prompt {i} " * 20, "sampling_params": {"max_new_tokens": 1}},
                          timeout=10)
            return untrusted() > u0 or router.unit_blocks(victim.url) > before

        row["router_saw_squatter_after_s"] = poll_until(fed, 40, 0.2)
        time.sleep(0.5)  # a batch applied after the counter moved would show now
        after = router.unit_blocks(victim.url)
        row["victim_blocks_before"], row["victim_blocks_after"] = before, after
        row["squatter_pages"] = squatter.resident_pages()
        row = finish(row, ctx, ld, router, m0, fault)
        row["untrusted_batches"] = untrusted() - u0
        if row["router_saw_squatter_after_s"] is None:
            row["violations"].append("the router never received the squatter's batches")
        if after > before:
            row["violations"].append(f"the squatter wrote into the dead worker's index ({before} -> {after} blocks)")
        return row
    finally:
        _stop(router, mocks)
        if squatter is not None:
            squatter.stop()


CASES = {
    "urls": case_url_safety,
    "headers": case_headers,
    "squat": case_squatted_event_port,
}
