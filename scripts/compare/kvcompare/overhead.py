"""Pure proxy overhead with `wrk` (Debian package): latency at 1 connection through a router
versus straight to a mock, maximum requests/s at many connections, and the throughput ratio
(through the router / straight to the same mocks with a client that spreads itself: one wrk
thread per mock), against `--speedup 0` workers. Each request is a small non-streaming
/generate with a random 32-token prompt."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

LUA = r"""
-- POST /generate with a fresh random 32-token prompt per request (no prefix reuse).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
math.randomseed(os.time())
request = function()
  local ids = {}
  for i = 1, 32 do ids[i] = math.random(5, 250) end
  local body = '{"input_ids":[' .. table.concat(ids, ",") ..
    '],"sampling_params":{"max_new_tokens":4,"temperature":0}}'
  return wrk.format(nil, "/generate", nil, body)
end
"""

_UNIT = {"us": 1.0, "ms": 1000.0, "s": 1e6}


def wrk_path() -> str | None:
    return shutil.which("wrk")


def write_lua(out_dir: Path) -> Path:
    p = out_dir / "post.lua"
    p.write_text(LUA)
    return p


def write_spread_lua(out_dir: Path, urls: list[str]) -> Path:
    """The same requests, with wrk thread i connected to `urls[i % n]` (run with -t len(urls)):
    a client that spreads itself over the mocks, no router in between."""
    hosts = []
    for u in urls:
        m = re.match(r"^https?://([^:/]+):(\d+)", u)
        if not m:
            raise ValueError(f"cannot spread over {u}")
        hosts.append(f'{{"{m.group(1)}", "{m.group(2)}"}}')
    p = out_dir / "spread.lua"
    p.write_text(LUA + "\nlocal hosts = {" + ", ".join(hosts) + "}\nlocal next_host = 0\n"
                 "function setup(thread)\n"
                 "  local h = hosts[next_host % #hosts + 1]\n"
                 "  next_host = next_host + 1\n"
                 "  thread.addr = wrk.lookup(h[1], h[2])[1]\n"
                 "end\n")
    return p


def run_wrk(url: str, lua: Path, threads: int, conns: int, seconds: int, log: Path) -> dict:
    """Runs wrk and returns {rps, requests, non2xx, p50_us, p90_us, p99_us, command}."""
    cmd = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--latency", "-s", str(lua), url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + r.stdout + r.stderr + "\n")
    out = {"command": " ".join(cmd[:-3] + ["-s", "post.lua", "URL"])}
    m = re.search(r"Requests/sec:\s*([\d.]+)", r.stdout)
    out["rps"] = float(m.group(1)) if m else None
    m = re.search(r"(\d+) requests in", r.stdout)
    out["requests"] = int(m.group(1)) if m else None
    m = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", r.stdout)
    out["non2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors:.*", r.stdout)
    out["socket_errors"] = m.group(0) if m else ""
    for pct in ("50", "90", "99"):
        m = re.search(rf"^\s*{pct}(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", r.stdout, re.M)
        out[f"p{pct}_us"] = float(m.group(1)) * _UNIT[m.group(2)] if m else None
    return out
