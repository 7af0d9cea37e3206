"""The processes a fault case runs: restartable `sglang-mock` workers on fixed ports (HTTP, ZMQ
events, replay, so a restart reuses them), the router (optionally under a low open-file limit),
loadgen, nats-server; and the probes read from them (metrics, /debug/index, /mock/state, VmRSS).
Process handling is the compare harness's (`kvcompare.procs`, `kvcompare.httpc`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

from kvcompare import httpc, presets, prom
from kvcompare.procs import Proc, ProcError, free_port

from . import records

PAGE = 16
# Fault detection within seconds instead of the defaults' ~26 s (stated with every figure).
# The worker-fault cases' health flags: a dead or frozen worker noticed in ~2 s, not the defaults'
# ~26 s (docs/router.md "Limits"), so each case stays short. Attack and bounds cases do not use them.
FAST_HEALTH = ["--health-check-interval-secs", "1", "--health-check-timeout-secs", "1",
               "--health-failure-threshold", "2", "--health-success-threshold", "1",
               "--stream-idle-timeout-secs", "2"]


class Mock:
    """One `sglang-mock` whose ports stay fixed across restarts."""

    def __init__(self, bin_path: Path, name: str, log_dir: Path, speedup: float,
                 max_total_tokens: int = 1 << 20, extra: list[str] | None = None):
        self.bin, self.name, self.log_dir = bin_path, name, log_dir
        self.speedup, self.max_total_tokens, self.extra = speedup, max_total_tokens, extra or []
        self.pick_ports()
        self.generation = 0
        self.proc: Proc | None = None
        self.start()

    def pick_ports(self) -> None:
        """Free HTTP, ZMQ and replay ports, and the URL they give."""
        self.port, self.zmq_port, self.replay_port = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        kv = {"publisher": "zmq", "endpoint": f"tcp://*:{self.zmq_port}",
              "replay_endpoint": f"tcp://*:{self.replay_port}", "topic": "kv-events"}
        return [str(self.bin), "--host", "127.0.0.1", "--port", str(self.port), "--page-size", str(PAGE),
                "--speedup", f"{self.speedup:g}", "--max-total-tokens", str(self.max_total_tokens),
                "--context-length", "32768", "--kv-events-config", json.dumps(kv),
                "--seed", str(self.port), *self.extra]

    def start(self, timeout: float = 30.0) -> None:
        """Starts the process; a port still held by the previous one is retried until `timeout`.
        A first start that cannot bind takes new ports instead (no router knows these yet)."""
        deadline = time.monotonic() + timeout
        first = self.proc is None
        while True:
            self.generation += 1
            p = Proc(f"{self.name}.{self.generation}", self.argv(),
                     self.log_dir / f"{self.name}.{self.generation}.log")
            try:
                p.wait_listening(max(1.0, deadline - time.monotonic()))
                break
            except ProcError:
                p.stop(grace=0.5)
                if time.monotonic() >= deadline:
                    raise
                if first:
                    self.pick_ports()
                time.sleep(0.2)
        self.proc = p
        httpc.wait_until(lambda: httpc.request("GET", self.url + "/health", timeout=2)[0] == 200,
                         30, f"{self.name} /health", proc=p)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.alive():
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL, reaped."""
        if self.proc is not None:
            self.signal(signal.SIGKILL)
            self.proc.stop(grace=0.5)

    def running(self) -> int:
        st = httpc.get_json(self.url + "/mock/state", timeout=2) or {}
        return sum(int(r.get("running", 0)) for r in st.get("ranks", []))

    def resident_pages(self) -> int | None:
        st = httpc.get_json(self.url + "/mock/state", timeout=2)
        if not isinstance(st, dict):
            return None
        return sum(int(r.get("cached_tokens_resident", 0)) for r in st.get("ranks", [])) // PAGE

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(grace=1.0)


class Router:
    """`router --mode kv` in front of `urls`; `nofile` starts it under `ulimit -n nofile`."""

    def __init__(self, bin_path: Path, urls: list[str], log: Path, extra: list[str] | None = None,
                 nofile: int | None = None, expect_healthy: int | None = None,
                 workers: list[str] | None = None):
        """`workers` replaces `--worker-urls URL...` (a PD fleet's `--pd-disaggregation --prefill ...`)."""
        argv = [str(bin_path), "--mode", "kv", "--host", "127.0.0.1", "--port", "0",
                "--page-size", str(PAGE), "--log-level", "warn", *(extra or []),
                *(workers if workers is not None else ["--worker-urls", *urls])]
        if nofile is not None:  # exec keeps the pid: RSS and signals reach the router itself
            argv = ["sh", "-c", f'ulimit -n {int(nofile)} && exec "$0" "$@"', *argv]
        self.proc = Proc("router", argv, log)
        try:
            self.url = self.proc.wait_listening(60)
            n = len(urls) if expect_healthy is None else expect_healthy
            httpc.wait_until(lambda: self.healthy_workers() >= n, 60,
                             f"router /readiness with {n} healthy workers", proc=self.proc, interval=0.1)
        except BaseException:
            self.proc.stop()
            raise
        self.pid = self.proc.pid

    def healthy_workers(self) -> int:
        status, body = httpc.request("GET", self.url + "/readiness", timeout=2)
        if status != 200:
            return 0
        try:
            return int(json.loads(body).get("healthy_workers", 0))
        except (ValueError, AttributeError, TypeError):
            return 0

    def metrics(self) -> prom.Series:
        status, body = httpc.request("GET", self.url + "/metrics", timeout=5)
        return prom.parse(body.decode("utf-8", "replace")) if status == 200 else {}

    def worker_healthy(self, url: str) -> bool | None:
        m = self.metrics()
        for (name, labels), v in m.items():
            if name == "kvrouter_worker_healthy" and dict(labels).get("worker", "").rstrip("/") == url:
                return v >= 1
        return None

    def index(self) -> dict:
        j = httpc.get_json(self.url + "/debug/index", timeout=5)
        return j if isinstance(j, dict) else {}

    def unit_blocks(self, url: str) -> int:
        return sum(int(u.get("blocks", 0)) for u in self.index().get("units", [])
                   if str(u.get("worker", "")).rstrip("/") == url)

    def rss_mb(self) -> float | None:
        return rss_mb(self.pid)

    def alive(self) -> bool:
        return self.proc.alive()

    def stop(self) -> None:
        self.proc.stop()


def rss_mb(pid: int) -> float | None:
    """VmRSS of one process in MiB (None once it exited)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


class Load:
    """One loadgen `tenants` run (Poisson arrivals) against `url`, records kept: the preset
    `faults-tenants` of workloads/presets.toml (its defaults where an argument here is None)."""

    def __init__(self, bin_path: Path, url: str, out: Path, tag: str, requests: int, wall_rate: float,
                 speedup: float, stream: bool = True, max_new_tokens: int | None = None, seed: int | None = None,
                 tenants: int | None = None, system_len: tuple[int, int] | None = None):
        self.speedup, self.requests = speedup, requests
        self.json = out / f"{tag}.loadgen.json"
        self.records_path = out / f"{tag}.records.jsonl"
        given = {"max_new_tokens": max_new_tokens, "seed": seed, "tenants": tenants}
        if system_len is not None:
            given["system_len_min"], given["system_len_max"] = system_len
        # Requests per second of simulated time: the wall rate / speedup.
        argv = [str(bin_path), *presets.argv(
            "faults-tenants", url=url, rate=f"{wall_rate / speedup:g}", requests=requests, speedup=f"{speedup:g}",
            json=self.json, records=self.records_path, **{k: v for k, v in given.items() if v is not None})]
        if stream:
            argv.append("--stream")
        self.argv = argv
        self.t0 = time.monotonic()
        self.proc = Proc(f"loadgen-{tag}", argv, out / "logs" / f"loadgen-{tag}.log")

    def now(self) -> float:
        """Wall seconds since loadgen was spawned."""
        return time.monotonic() - self.t0

    def anchor(self, seen, timeout: float = 20.0) -> None:
        """Polls `seen()` (the router has a request in flight) right after the spawn: its time,
        less the first record's start, is how far loadgen's time base lags the spawn."""
        self.first_seen = None
        t = poll_until(seen, timeout, interval=0.005)
        if t is not None:
            self.first_seen = self.now()

    def to_records_time(self, wall: float, recs: list[dict]) -> float:
        """A wall time (seconds since spawn) in the records' base (seconds since loadgen's run start)."""
        starts = [records.start_s(r, self.speedup) for r in recs]
        if getattr(self, "first_seen", None) is None or not starts:
            return wall
        return wall - max(0.0, self.first_seen - min(starts))

    def expected_s(self, wall_rate: float) -> float:
        return self.requests / wall_rate

    def wait(self, timeout: float = 300.0) -> list[dict]:
        rc = self.proc.wait_exit(timeout)
        self.proc.stop(grace=0.5)
        if rc != 0:
            raise RuntimeError(f"loadgen exited {rc}; log: {self.proc.log_path}\n{self.proc.tail()}")
        return records.load(self.records_path)


class Nats:
    """nats-server with JetStream on a fixed port and store directory (restartable)."""

    def __init__(self, bin_path: Path, store: Path, log_dir: Path):
        self.bin, self.store, self.log_dir = bin_path, store, log_dir
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.generation = 0
        self.proc: Proc | None = None
        self.start()

    def start(self, timeout: float = 20.0) -> None:
        self.generation += 1
        self.proc = Proc(f"nats.{self.generation}", [str(self.bin), "-a", "127.0.0.1", "-p", str(self.port),
                                                     "-js", "-sd", str(self.store)],
                         self.log_dir / f"nats.{self.generation}.log")
        httpc.wait_until(lambda: _port_open(self.port), timeout, "nats-server port", proc=self.proc)

    def kill(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.stop(grace=0.5)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def poll_until(pred, timeout: float, interval: float = 0.05) -> float | None:
    """Seconds until `pred()` held, or None after `timeout` (a measurement, not an assertion)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return round(time.monotonic() - t0, 3)
        time.sleep(interval)
    return None
