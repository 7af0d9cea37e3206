#!/usr/bin/env python3
"""The issue-12 fault suite: one command that starts real processes on loopback (sglang-mock
workers with ZMQ KV events, `router --mode kv`, loadgen, nats-server) and runs each fault case
under load, recording what the client saw, recovery times, router memory and the router
counters that show the mechanism. `--quick` (scripts/test) checks only the invariants.

    python3 scripts/faults/faults.py [--quick] [--bin-dir target/release] [--out DIR]
                                     [--cases killed,frozen,...] [--update-docs]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
# kvcompare (processes, metrics, the preset table) is the comparison harness's package, next door.
sys.path.insert(0, str(REPO / "scripts" / "compare"))

from kvcompare import presets, procs, runenv  # noqa: E402
from kvfaults import cases, report  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small shapes, invariants only (CI)")
    ap.add_argument("--bin-dir", default=str(REPO / "target" / "release"),
                    help="directory with router, sglang-mock and loadgen")
    ap.add_argument("--nats-server", default=None, help="nats-server binary (default: target/test-venv/bin, then PATH)")
    ap.add_argument("--out", default=str(REPO / "target" / "faults"), help="results, records and logs")
    ap.add_argument("--cases", default=",".join(cases.CASES), help="comma-separated subset of: " + ", ".join(cases.CASES))
    ap.add_argument("--update-docs", action="store_true", help="replace the faults block in docs/benchmarks.md")
    a = ap.parse_args()

    bin_dir = Path(a.bin_dir)
    for b in ("router", "sglang-mock", "loadgen"):
        if not (bin_dir / b).exists():
            raise SystemExit(f"missing binary {bin_dir / b} (cargo build -p kvrouter -p kvrouter-sim --bins)")
    picked = [c.strip() for c in a.cases.split(",") if c.strip()]
    unknown = [c for c in picked if c not in cases.CASES]
    if unknown:
        raise SystemExit(f"--cases: unknown {unknown} (known: {', '.join(cases.CASES)})")
    out = Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    (out / "logs").mkdir(parents=True)
    ctx = cases.Ctx(bin_dir=bin_dir, nats_bin=find_nats(a.nats_server), out=out,
                    size=cases.QUICK if a.quick else cases.FULL)
    procs.install_signal_handlers()
    started = dt.datetime.now(dt.timezone.utc)
    load0 = os.getloadavg()[0]
    rows = []
    try:
        for name in picked:
            t0 = time.monotonic()
            print(f"[faults] {name} ...", flush=True)
            try:
                row = cases.CASES[name](ctx)
            except KeyboardInterrupt:
                raise
            except Exception as e:  # one broken case must not hide the others
                row = {"case": name, "error": f"{type(e).__name__}: {e}", "violations": [f"case failed: {e}"],
                       "traceback": traceback.format_exc()}
            row["id"] = name
            row["wall_s"] = round(time.monotonic() - t0, 1)
            row["loadavg_1m"] = round(os.getloadavg()[0], 1)
            rows.append(row)
            bad = row.get("violations") or []
            print(f"[faults] {name}: {'ok' if not bad else 'VIOLATED: ' + '; '.join(bad)} ({row['wall_s']} s)",
                  flush=True)
    finally:
        procs.stop_all()
    meta = {"started": started.strftime("%Y-%m-%d %H:%M UTC"), "git": runenv.git_describe(),
            "machine": runenv.machine(), "binaries": runenv.describe_bins(bin_dir, a),
            "quick": a.quick, "size": vars(ctx.size), "loadavg_1m_start": round(load0, 1),
            "loadavg_1m_end": round(os.getloadavg()[0], 1)}
    (out / "results.json").write_text(json.dumps({"meta": meta, "cases": rows}, indent=2))
    header = describe(meta, a)
    md = header + "\n\n" + report.table(rows) + "\n"
    (out / "results.md").write_text(md)
    print(md)
    if a.update_docs:
        doc = REPO / "docs" / "benchmarks.md"
        doc.write_text(report.replace_block(doc.read_text(), report.block(rows, header)))
        print(f"[faults] updated {doc}")
    failed = [r["id"] for r in rows if r.get("violations")]
    if failed:
        print(f"[faults] invariants violated in: {', '.join(failed)} (see {out / 'results.json'})", flush=True)
        return 1
    return 0


def find_nats(given: str | None) -> Path | None:
    if given:
        return Path(given)
    local = REPO / "target" / "test-venv" / "bin" / "nats-server"
    if local.exists():
        return local
    found = shutil.which("nats-server")
    return Path(found) if found else None


def describe(meta: dict, a) -> str:
    s = meta["size"]
    tokens = presets.preset("faults-tenants")["defaults"]["max_new_tokens"]
    return (f"Measured {meta['started']} on {meta['machine']}, kvrouter `{meta['git']}`; binaries: "
            f"{meta['binaries']}; load average (1 min) {meta['loadavg_1m_start']} at start, "
            f"{meta['loadavg_1m_end']} at end. Load: loadgen `tenants --stream` ({s['requests']} requests per case, "
            f"{s['wall_rate']:g}/s wall, {tokens} output tokens) through `router --mode kv` over {s['workers']} "
            f"`sglang-mock --speedup {s['speedup']:g}` with ZMQ events; health flags "
            f"`--health-check-interval-secs 1 --health-check-timeout-secs 1 --health-failure-threshold 2 "
            f"--health-success-threshold 1 --stream-idle-timeout-secs 2` in the cases that kill, freeze or restart "
            f"a process (killed, frozen, restarted, NATS, SIGTERM, flood, PD): a dead or frozen worker is then noticed "
            f"in ~2 s instead of the defaults' ~26 s, which keeps each case short; the attack and bounds cases run on "
            f"the shipped defaults, and any other flag is named in the fault. "
            f"Sent / ok / failed are loadgen's records; times are wall seconds after the fault (approximate by "
            f"loadgen's start-up, tens of ms). Reproduce: `python3 scripts/faults/faults.py"
            f"{' --quick' if a.quick else ''} --bin-dir {a.bin_dir} --update-docs`.")


if __name__ == "__main__":
    sys.exit(main())
