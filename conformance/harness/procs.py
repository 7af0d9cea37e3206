"""Child processes (router, fake SGLang worker, sglang-mock), free ports and small HTTP
helpers. Every child is started here and stopped by its own pid."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # conformance/


def free_port_range(n=1, host="127.0.0.1"):
    """A base port with ``n`` consecutive free TCP ports (racy by nature)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind((host, 0))
            base = s.getsockname()[1]
        if base + n >= 65000:
            continue
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind((host, p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free port range")


class Proc:
    def __init__(self, name, argv, env=None, ready_timeout=60.0):
        self.name = name
        self.argv = argv
        self.log_lines = []
        self.url = None
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=env, bufsize=1)
        ready = threading.Event()

        def pump():
            for line in self.p.stdout:
                self.log_lines.append(line.rstrip("\n"))
                if len(self.log_lines) > 4000:
                    del self.log_lines[:1000]
                if self.url is None and "listening on " in line:
                    self.url = line.split("listening on ", 1)[1].strip()
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(ready_timeout) or self.url is None:
            self.stop()
            raise RuntimeError(f"{name} did not start: {' '.join(argv)}\n" + self.tail())

    def tail(self, n=30):
        return "\n".join(self.log_lines[-n:])

    def grep(self, word):
        return [line for line in self.log_lines if word in line]

    @property
    def pid(self):
        return self.p.pid

    def stop(self, kill=False):
        if self.p.poll() is None:
            (self.p.kill if kill else self.p.terminate)()
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)


class Env:
    """Paths and the processes of one run."""

    def __init__(self, target_dir, python=None, native=None, log_level="warn"):
        self.router_bin = os.path.join(target_dir, "debug", "router")
        self.mock_bin = os.path.join(target_dir, "debug", "sglang-mock")
        self.python = python or sys.executable
        self.native = native
        self.log_level = log_level
        self.procs = []
        self.mock_flags = []  # e.g. --sglang-version 0.5.9 --kv-events-format positional

    def track(self, proc):
        self.procs.append(proc)
        return proc

    def stop_all(self):
        for p in reversed(self.procs):
            p.stop(kill=True)
        self.procs.clear()

    def router(self, workers, extra=(), port=0, health_interval=1.0):
        argv = [self.router_bin, "--mode", "kv", "--page-size", "16", "--host", "127.0.0.1",
                "--port", str(port), "--health-check-interval-secs", str(health_interval),
                "--health-check-timeout-secs", "2", "--health-failure-threshold", "1",
                "--health-success-threshold", "1", "--retry-initial-backoff-ms", "5",
                "--log-level", self.log_level]
        if workers:
            argv += ["--worker-urls", *workers]
        argv += list(extra)
        return self.track(Proc("router", argv))

    def sglang_worker(self, *, port=0, page_size=16, dp_size=1, kv_events_config=None,
                      load_publish_endpoint=None, capacity=65536, host="127.0.0.1",
                      disaggregation_mode=None, disaggregation_bootstrap_port=None):
        if port == 0:
            port = free_port_range(1)
        cfg = {"host": host, "port": port, "page_size": page_size, "dp_size": dp_size,
               "capacity": capacity, "kv_events_config": kv_events_config,
               "load_publish_endpoint": load_publish_endpoint, "native": self.native,
               "disaggregation_mode": disaggregation_mode,
               "disaggregation_bootstrap_port": disaggregation_bootstrap_port}
        env = dict(os.environ, PYTHONPATH=HERE)
        return self.track(Proc("sglang-worker", [self.python, "-m", "harness.worker",
                                                 json.dumps(cfg)], env=env))

    def mock_supports(self, flag):
        """Whether this sglang-mock build has ``flag`` (newer mocks add flags)."""
        if not hasattr(self, "_mock_help"):
            try:
                self._mock_help = subprocess.run([self.mock_bin, "--help"], capture_output=True,
                                                 text=True, timeout=10).stdout
            except (OSError, subprocess.TimeoutExpired):
                self._mock_help = ""
        return flag in self._mock_help

    def mock_worker(self, *, port=0, page_size=16, dp_size=1, kv_events_config=None,
                    load_publish_endpoint=None, capacity=65536, extra=()):
        argv = [self.mock_bin, "--host", "127.0.0.1", "--port", str(port), "--speedup", "0",
                "--page-size", str(page_size), "--dp-size", str(dp_size),
                "--max-total-tokens", str(capacity)]
        if kv_events_config:
            argv += ["--kv-events-config", kv_events_config]
        if load_publish_endpoint:
            argv += ["--load-publish-endpoint", load_publish_endpoint]
        argv += list(extra)
        return self.track(Proc("sglang-mock", argv))


# ---- HTTP -------------------------------------------------------------------------------

def http(method, url, body=None, timeout=10.0, headers=None):
    """(status, headers dict, parsed JSON or text)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status, hdrs = r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        raw, status, hdrs = e.read(), e.code, dict(e.headers)
    try:
        return status, hdrs, json.loads(raw) if raw else None
    except ValueError:
        return status, hdrs, raw.decode(errors="replace")


def get(url, **kw):
    return http("GET", url, **kw)


def post(url, body=None, **kw):
    return http("POST", url, body if body is not None else {}, **kw)


def wait_for(pred, timeout=10.0, interval=0.05):
    """Polls ``pred()`` until it returns a truthy value; returns (value, last)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = pred()
        except Exception as e:  # a child still starting
            last = e
        if last and not isinstance(last, Exception):
            return True, last
        if time.monotonic() > deadline:
            return False, last
        time.sleep(interval)
