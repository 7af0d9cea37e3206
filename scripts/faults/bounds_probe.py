#!/usr/bin/env python3
"""Issue 25 items 2 probe: the router's RSS under client-grown state, with its shipped defaults.

One `sglang-mock --speedup 0` and one `router` (no flags beyond the worker URL); phases:
(1) 5,000 distinct 32 KiB `X-SMG-Routing-Key`s; (2) 1,000,000 distinct 200-byte keys
(pipelined keep-alive requests); (3) 100 uploads announcing 60 MiB that send 16 MiB each and
then trickle a byte a second. Prints the router's VmRSS after each phase, and the statuses of the
uploads (a 503 names `max_inflight_body_bytes`). Kept out of CI (minutes, GBs of traffic):

    python3 scripts/faults/bounds_probe.py --bin-dir target/release [--keys 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import threading
import time


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return -1.0


def spawn(argv: list[str]) -> tuple[subprocess.Popen, int]:
    """Starts a server on port 0 and returns it with the port it announces on stdout."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert p.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        m = re.search(r"127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, int(m.group(1))
    raise SystemExit(f"{argv[0]} did not announce a port")


def wait_ready(port: int) -> None:
    for _ in range(600):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /readiness HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if b" 200 " in s.recv(64):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("router not ready")


def read_response(f) -> int:
    status = int(f.readline().split()[1])
    length = 0
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            break
        k, _, v = line.decode().partition(":")
        if k.lower() == "content-length":
            length = int(v)
    f.read(length)
    return status


def keys(port: int, n: int, key_len: int, conns: int = 4, depth: int = 64) -> int:
    body = json.dumps({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1}}).encode()
    failed = [0]

    def run(part: int) -> None:
        s = socket.create_connection(("127.0.0.1", port))
        f = s.makefile("rb")
        for start in range(part * depth, n, conns * depth):
            batch = b"".join(
                b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\nX-SMG-Routing-Key: {i:010d}{'k' * (key_len - 10)}\r\n\r\n".encode()
                + body for i in range(start, min(start + depth, n)))
            s.sendall(batch)
            for _ in range(start, min(start + depth, n)):
                if read_response(f) != 200:
                    failed[0] += 1
        s.close()

    ts = [threading.Thread(target=run, args=(c,)) for c in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return failed[0]


def trickle(port: int, n: int, first: int, hold_s: float) -> list[int]:
    statuses = [0] * n
    stop = threading.Event()

    def run(i: int) -> None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=hold_s + 30) as s:
                s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 62914560\r\n\r\n[")
                chunk = b"1," * (1 << 19)
                sent = 0
                while sent < first:
                    s.sendall(chunk)
                    sent += len(chunk)
                s.setblocking(False)
                while not stop.wait(1.0):
                    try:
                        head = s.recv(64)
                        statuses[i] = int(head.split()[1]) if head else -1
                        return
                    except BlockingIOError:
                        s.sendall(b"1")
        except OSError:
            statuses[i] = statuses[i] or -2

    ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    time.sleep(hold_s)
    stop.set()
    for t in ts:
        t.join(5)
    return statuses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default="target/release", help="where `router` is")
    ap.add_argument("--mock-dir", default=None, help="where `sglang-mock` is (default: --bin-dir)")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--uploads", type=int, default=100)
    a = ap.parse_args()
    mock, mport = spawn([os.path.join(a.mock_dir or a.bin_dir, "sglang-mock"), "--host", "127.0.0.1", "--port", "0",
                         "--speedup", "0"])
    router, rport = spawn([os.path.join(a.bin_dir, "router"), "--host", "127.0.0.1", "--port", "0",
                           "--prometheus-port", "0", "--log-level", "error",
                           "--worker-urls", f"http://127.0.0.1:{mport}"])
    try:
        wait_ready(rport)
        print(f"start: RSS {rss_mb(router.pid)} MB", flush=True)
        t0 = time.monotonic()
        bad = keys(rport, 5000, 32 << 10)
        print(f"5,000 x 32 KiB keys: RSS {rss_mb(router.pid)} MB ({bad} failed, {time.monotonic() - t0:.0f} s)",
              flush=True)
        t0 = time.monotonic()
        bad = keys(rport, a.keys, 200)
        print(f"{a.keys:,} x 200 B keys: RSS {rss_mb(router.pid)} MB ({bad} failed, {time.monotonic() - t0:.0f} s)",
              flush=True)
        st = trickle(rport, a.uploads, 16 << 20, 20)
        print(f"{a.uploads} uploads of 16 MiB then trickling: RSS {rss_mb(router.pid)} MB during; "
              f"answers {sorted(set(st))} (503: {st.count(503)}, none yet: {st.count(0)})", flush=True)
    finally:
        router.terminate()
        mock.terminate()


if __name__ == "__main__":
    main()
