#!/usr/bin/env python3
"""KV routing quality benchmark (not a test): 4 sglang-mock workers, loadgen grpo and agent,
through the router in each mode; prints a markdown table for docs/benchmarks.md.

Usage: CARGO_TARGET_DIR=... cargo build --release --bins && python3 benches/kv_quality.py [BIN_DIR]
"""
import json, os, subprocess, sys, tempfile, time, urllib.request
from collections import Counter, defaultdict

BIN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KV_BIN", "target/release")
SPEEDUP = os.environ.get("KV_SPEEDUP", "10")
ADMIN = "bench-admin"
KV_CFG = '{"publisher":"zmq","endpoint":"tcp://*:0","replay_endpoint":"tcp://*:0"}'
GRPO = ["grpo", "--groups", "32", "--samples", "32", "--prompt-len", "1024",
        "--system-prefix-len", "256", "--groups-in-flight", "4"]
AGENT = ["agent", "--sessions", "32", "--turns", "6", "--system-prefix-len", "512",
         "--first-prompt-len", "256", "--tool-output-len", "128"]
COMMON = ["--concurrency", "128", "--max-new-tokens", "64", "--seed", "1"]
procs = []


def spawn(args):
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    procs.append(p)
    for line in p.stdout:
        if line.startswith("listening on "):
            return p, line.split()[-1].strip()
    raise RuntimeError(f"{args[0]} did not start")


def get(url, key=None):
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except Exception:
        return 0, b""


def post(url):
    req = urllib.request.Request(url, data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status


def wait(cond, what, secs=60):
    end = time.time() + secs
    while time.time() < end:
        if cond():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timeout: {what}")


def loadgen(urls, workload, extra=()):
    with tempfile.TemporaryDirectory() as d:
        out, rec = os.path.join(d, "s.json"), os.path.join(d, "r.jsonl")
        subprocess.run([f"{BIN}/loadgen", "--url", ",".join(urls), *COMMON, *extra,
                        "--json", out, "--records", rec, "--output", "json", *workload],
                       check=True, stdout=subprocess.DEVNULL)
        s = json.load(open(out))
        records = [json.loads(l) for l in open(rec)]
    return s, records


def cohesion(records):
    """Share of groups/sessions whose requests all went to one worker, and mean workers per group."""
    by = defaultdict(Counter)
    for r in records:
        by[r["tag"].split("/")[0]][r.get("worker")] += 1
    one = sum(1 for c in by.values() if len(c) == 1)
    return one / max(1, len(by)), sum(len(c) for c in by.values()) / max(1, len(by))


def row(label, s, records):
    coh, spread = cohesion(records)
    t = s["ttft_ms"] or {}
    per = sorted(w["requests"] for w in s["per_worker"])
    return (f"| {label} | {100 * (s['prefix_hit_rate'] or 0):.1f} % | {t.get('p50', 0):.1f} | "
            f"{t.get('p99', 0):.1f} | {s['throughput']['requests_per_sec']:.0f} | "
            f"{100 * coh:.0f} % / {spread:.2f} | {per} | {s['requests']['failed']} |")


def main():
    mocks = [spawn([f"{BIN}/sglang-mock", "--host", "127.0.0.1", "--port", "0", "--page-size", "16",
                    "--speedup", SPEEDUP, "--kv-events-config", KV_CFG])[1] for _ in range(4)]
    flush = lambda: [post(f"{m}/flush_cache") for m in mocks]
    header = ("| workload | mode | prefix hit | TTFT p50 ms | TTFT p99 ms | req/s | "
              "groups on one worker / workers per group | requests per worker | failed |\n"
              "|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name, wl in (("grpo", GRPO), ("agent", AGENT)):
        flush()
        s, r = loadgen(mocks, wl, ["--url-pick", "sticky"])
        rows.append(f"| {name} " + row("ideal: direct, sticky by group/session", s, r))
    modes = [("kv", []), ("kv --no-predict", ["--no-predict"]),
             ("least-load", []), ("round-robin", [])]
    for label, extra in modes:
        mode = label.split()[0]
        args = [f"{BIN}/router", "--host", "127.0.0.1", "--port", "0", "--mode", mode,
                "--page-size", "16", "--admin-api-key", ADMIN, *extra]
        for m in mocks:
            args += ["--worker-urls", m]
        p, url = spawn(args)
        wait(lambda: get(f"{url}/readiness")[0] == 200 and
             json.loads(get(f"{url}/readiness")[1]).get("healthy_workers") == 4, "router ready")
        if mode == "kv":
            wait(lambda: json.loads(get(f"{url}/debug/index", ADMIN)[1] or b"{}")
                 .get("zmq_sources") == 4, "kv sources")
            time.sleep(0.3)  # ZMQ slow joiner: let the SUB subscriptions settle before traffic
        for name, wl in (("grpo", GRPO), ("agent", AGENT)):
            flush()
            s, r = loadgen([url], wl)
            rows.append(f"| {name} " + row(label, s, r))
        if mode == "kv":
            _, m = get(f"{url}/metrics")
            for line in m.decode().splitlines():
                if line.startswith(("kvrouter_kv_predicted_hit_tokens_total",
                                    "kvrouter_kv_actual_hit_tokens_total",
                                    "kvrouter_kv_prompt_tokens_total")):
                    print(f"<!-- {label}: {line} -->")
        p.kill()
        p.wait()
    print(header)
    print("\n".join(rows))


try:
    main()
finally:
    for p in procs:
        p.kill()
