"""Fault cases of issue 25, items 2 and 3, each with the router's shipped defaults (no bound,
health or timeout flags):

- `sticky`: thousands of distinct 16 KiB `X-SMG-Routing-Key`s; the router's RSS stays within its
  start plus the sticky table's stated bound (16-byte hashed keys, 262,144 at most) plus 64 MiB.
- `trickle`: many uploads announce 60 MiB, send 256 KiB and then trickle one byte a second; the
  router's RSS stays within what they sent (x2 for buffer growth) plus 64 MiB, and a good
  request is still served.
- `ridprefix`: a victim's `rid` is `victim-1`; an attacker sends `rid: "v"` (a prefix) to the
  same worker and disconnects: the victim still completes (`finish_reason` not `abort`).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

from . import attacks
from .caselib import Ctx, _stop, expect, fleet
from .rig import Router, poll_until

# docs/router.md, Limits: a full sticky table (262,144 keys of 48 bytes in power-of-two tables).
STICKY_BOUND_MB = 32


def _row(case: str, fault: str) -> dict:
    return {"case": case, "fault": fault, "violations": []}


def _post(url: str, body: dict, headers: dict | None = None, timeout: float = 60) -> tuple[int, bytes]:
    host, port = attacks._addr(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", "/generate", body=json.dumps(body),
                     headers={"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        return r.status, r.read()
    except OSError:
        return 0, b""
    finally:
        conn.close()


def case_sticky_keys(ctx: Ctx) -> dict:
    # Before the fix every key was held whole for the 4 h TTL: 8,000 x 16 KiB = 125 MiB, past
    # the bound below; now the table holds 16 bytes a key.
    n = 8000 if ctx.size.requests < 100 else 20000
    key_len = 16 << 10
    row = _row("distinct long sticky keys (shipped defaults)",
               f"{n} requests, each with its own {key_len >> 10} KiB X-SMG-Routing-Key")
    mocks = fleet(ctx, "sticky", 1)
    router = None
    try:
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / "sticky" / "router.log")
        rss0 = router.rss_mb() or 0.0
        row["rss_before_mb"] = rss0
        failed = []
        lock = threading.Lock()

        def send(part: int, threads: int) -> None:
            host, port = attacks._addr(router.url)
            conn = http.client.HTTPConnection(host, port, timeout=30)
            body = json.dumps({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1}})
            for i in range(part, n, threads):
                key = f"{i:08d}" + "k" * (key_len - 8)
                try:
                    conn.request("POST", "/generate", body=body,
                                 headers={"Content-Type": "application/json", "X-SMG-Routing-Key": key})
                    r = conn.getresponse()
                    r.read()
                    status = r.status
                except OSError:
                    conn.close()
                    conn = http.client.HTTPConnection(host, port, timeout=30)
                    status = 0
                if status != 200:
                    with lock:
                        failed.append(status)
            conn.close()

        threads = [threading.Thread(target=send, args=(t, 4), daemon=True) for t in range(4)]
        for t in threads:
            t.start()
        peak = rss0
        while any(t.is_alive() for t in threads):
            peak = max(peak, router.rss_mb() or 0.0)
            time.sleep(0.2)
        row["rss_peak_mb"] = peak
        row["rss_after_mb"] = router.rss_mb()
        row["failed_requests"] = len(failed)
        row["bound_peak_mb"] = round(rss0 + STICKY_BOUND_MB + 64, 1)
        return expect(row,
                      (peak <= row["bound_peak_mb"], f"RSS peak {peak} MiB above the bound {row['bound_peak_mb']}"),
                      (not failed, f"{len(failed)} requests failed: {sorted(set(failed))}"))
    finally:
        _stop(router, mocks)


class Trickle(threading.Thread):
    """POST /generate announcing 60 MiB, sends `first` bytes, then one byte a second until told."""

    def __init__(self, url: str, first: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.url, self.first, self.stop = url, first, stop
        self.sent = 0
        self.status: int | None = None

    def run(self) -> None:
        host, port = attacks._addr(self.url)
        try:
            with socket.create_connection((host, port), timeout=5) as s:
                s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 62914560\r\n\r\n[")
                s.sendall(b"1," * (self.first // 2))
                self.sent = self.first
                while not self.stop.wait(1.0):
                    s.sendall(b"1")
                    self.sent += 1
        except OSError:
            pass


def case_trickling_uploads(ctx: Ctx) -> dict:
    n = 30 if ctx.size.requests < 100 else 100
    first = 256 << 10
    row = _row("trickling uploads (shipped defaults)",
               f"{n} uploads announce 60 MiB, send {first >> 10} KiB, then one byte a second; a good request meanwhile")
    mocks = fleet(ctx, "trickle", 1)
    router = None
    stop = threading.Event()
    ups: list[Trickle] = []
    try:
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / "trickle" / "router.log")
        rss0 = router.rss_mb() or 0.0
        row["rss_before_mb"] = rss0
        ups = [Trickle(router.url, first, stop) for _ in range(n)]
        for u in ups:
            u.start()
        poll_until(lambda: all(u.sent >= first for u in ups), 30)
        peak = rss0
        t_end = time.monotonic() + 5
        while time.monotonic() < t_end:
            peak = max(peak, router.rss_mb() or 0.0)
            time.sleep(0.2)
        status, body = _post(router.url, {"text": "good", "sampling_params": {"max_new_tokens": 4}})
        row["good_request_status"] = status
        row["rss_peak_mb"] = peak
        row["bound_peak_mb"] = round(rss0 + 2 * n * first / (1 << 20) + 64, 1)
        return expect(row,
                      (peak <= row["bound_peak_mb"], f"RSS peak {peak} MiB above the bound {row['bound_peak_mb']}"),
                      (status == 200, f"the good request answered {status}: {body[:200]!r}"))
    finally:
        stop.set()
        for u in ups:
            u.join(5)
        _stop(router, mocks)


def case_rid_prefix_abort(ctx: Ctx) -> dict:
    row = _row("rid-prefix abort (shipped defaults)",
               "victim rid victim-1 streaming; an attacker sends rid v to the same worker and disconnects")
    mocks = fleet(ctx, "ridprefix", 1)
    router = None
    try:
        router = Router(ctx.b("router"), [m.url for m in mocks], ctx.out / "logs" / "ridprefix" / "router.log")
        host, port = attacks._addr(router.url)
        victim = http.client.HTTPConnection(host, port, timeout=120)
        victim.request("POST", "/generate", headers={"Content-Type": "application/json"},
                       body=json.dumps({"text": "victim", "rid": "victim-1", "stream": True,
                                        "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}))
        vr = victim.getresponse()
        first = vr.readline()
        attacker = http.client.HTTPConnection(host, port, timeout=30)
        attacker.request("POST", "/generate", headers={"Content-Type": "application/json"},
                         body=json.dumps({"text": "attacker", "rid": "v", "stream": True,
                                          "sampling_params": {"max_new_tokens": 100000, "ignore_eos": True}}))
        ar = attacker.getresponse()
        ar.readline()
        attacker.sock.close()
        attacker.close()
        rest = first + vr.read()
        victim.close()
        events = [json.loads(line[6:]) for line in rest.decode("utf-8", "replace").splitlines()
                  if line.startswith("data: {")]
        finish = (events[-1].get("meta_info", {}).get("finish_reason") or {}) if events else {}
        row["victim_finish_reason"] = finish.get("type")
        m = router.metrics()
        row["abort_skipped"] = sum(v for (name, _), v in m.items() if name == "kvrouter_abort_skipped_total")
        return expect(row,
                      (finish.get("type") == "length", f"the victim ended with {finish} (expected length)"),
                      (row["abort_skipped"] >= 1, "kvrouter_abort_skipped_total did not count the skipped abort"))
    finally:
        _stop(router, mocks)


CASES = {
    "sticky": case_sticky_keys,
    "trickle": case_trickling_uploads,
    "ridprefix": case_rid_prefix_abort,
}
