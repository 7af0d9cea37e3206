"""Small loopback HTTP helpers (stdlib urllib): GET/POST with a timeout, readiness polling."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request


def request(method: str, url: str, body: dict | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    """Returns (status, body); status 0 when the connection itself failed."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, b""


def get_json(url: str, timeout: float = 5.0):
    status, body = request("GET", url, timeout=timeout)
    if status != 200:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def wait_until(pred, timeout: float, what: str, interval: float = 0.1, proc=None) -> None:
    """Polls `pred()` until true; fails early if `proc` (a procs.Proc) has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited while waiting for {what}; log: {proc.log_path}\n{proc.tail()}")
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}"
                       + (f"; log: {proc.log_path}\n{proc.tail()}" if proc is not None else ""))
