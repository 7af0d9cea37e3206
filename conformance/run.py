#!/usr/bin/env python3
"""SGLang conformance harness: the router binary against fake workers built from SGLang's
own package (or against sglang-mock), plus the mock-vs-SGLang event-stream differential.

Run through scripts/conformance (installs the pinned SGLang, builds the binaries), or:
  target/conformance-venv-0.5.23/bin/python conformance/run.py --version 0.5.23 \
      --worker sglang --target-dir target --results docs/results/conformance
Options: --worker sglang|mock|both, --quick (the short form), --only NAME[,NAME],
--router-bin / --mock-bin (other binaries than TARGET/debug/),
(index, discovery, replay, restart, namespaces, tiers, load, pd, differential),
--no-results (do not write the results page). Exit code 1 when any check fails or
finds a router feature missing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import native, procs, report, sglang_env  # noqa: E402
from harness.checks import (  # noqa: E402
    differential, discovery, index, load, namespaces, pd, replay, restart, tiers)
from harness.result import FAIL, Result  # noqa: E402

CHECKS = {
    "index": index.run,
    "discovery": discovery.run,
    "replay": replay.run,
    "restart": restart.run,
    "namespaces": namespaces.run,
    "tiers": tiers.run,
    "load": load.run,
    "pd": pd.run,
}
QUICK = ["index", "discovery", "restart", "namespaces", "load", "pd"]


class Ctx:
    def __init__(self, env, kind, S, quick):
        self.env, self.kind, self.S, self.quick = env, kind, S, quick


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", default="0.5.23")
    ap.add_argument("--worker", default="both", choices=["sglang", "mock", "both"])
    ap.add_argument("--target-dir", default=os.path.join(procs.HERE, "..", "target"))
    ap.add_argument("--results", default=os.path.join(procs.HERE, "..", "docs", "results",
                                                      "conformance"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--no-results", action="store_true")
    ap.add_argument("--router-bin", help="router binary (default TARGET/debug/router)")
    ap.add_argument("--mock-bin", help="sglang-mock binary (default TARGET/debug/sglang-mock)")
    args = ap.parse_args()
    t0 = time.monotonic()
    target = os.path.abspath(args.target_dir)
    nat_path, nat_why = native.build(target)
    S = sglang_env.load(native.load(nat_path))
    if S.version != args.version:
        print(f"run.py: installed SGLang is {S.version}, asked for {args.version}", file=sys.stderr)
        return 2
    print(f"SGLang {S.version} from {os.path.dirname(sys.modules['sglang'].__file__)}")
    print(f"native hash: {S.native_hash}" + (f" ({nat_why})" if nat_why else ""))
    for k, v in S.missing.items():
        print(f"not in this version: {k}: {v}")
    env = procs.Env(target, python=sys.executable, native=nat_path)
    env.router_bin = args.router_bin or env.router_bin
    env.mock_bin = args.mock_bin or env.mock_bin
    if not S.version.startswith("0.5.23"):
        # the mock's older-engine mode (docs/mock.md): 0.5.9 server info, /get_load,
        # positional events with 3-frame replay
        env.mock_flags = ["--sglang-version", "0.5.9", "--kv-events-format", "positional"]
    names = [n for n in (args.only.split(",") if args.only else
                         (QUICK if args.quick else list(CHECKS) + ["differential"])) if n]
    kinds = ["sglang", "mock"] if args.worker == "both" else [args.worker]
    results = []
    for kind in kinds:
        ctx = Ctx(env, kind, S, args.quick)
        for n in names:
            if n == "differential":
                continue
            print(f"== {n} ({kind})", flush=True)
            try:
                r = CHECKS[n](ctx)
            except Exception as e:
                traceback.print_exc()
                r = Result(n, FAIL, f"harness error: {type(e).__name__}: {e}", 0.0, kind)
            finally:
                env.stop_all()
            print(f"-> {n} ({kind}): {r.status} {r.detail[:300]}", flush=True)
            results.append(r)
    if "differential" in names:
        print("== differential (mock vs SGLang)", flush=True)
        try:
            r = differential.run(Ctx(env, "mock", S, args.quick))
        except Exception as e:
            traceback.print_exc()
            r = Result("differential", FAIL, f"harness error: {type(e).__name__}: {e}", 0.0,
                       "mock vs sglang")
        finally:
            env.stop_all()
        print(f"-> differential: {r.status} {r.detail[:300]}", flush=True)
        results.append(r)
    secs = time.monotonic() - t0
    failed = [r for r in results if r.failed]
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed"
          f" ({secs:.0f} s, SGLang {S.version})")
    if not args.no_results:
        cmd = "conformance/run.py " + " ".join(sys.argv[1:])
        path = report.write(args.results, S, results, secs, cmd, args, nat_why, env)
        print(f"results: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
