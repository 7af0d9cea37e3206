#!/usr/bin/env python3
"""Runs the cargo-fuzz targets of crates/kvrouter/fuzz for a fixed time each, from small seed
inputs written here (valid request bodies, SGLang batches, Dynamo events; nothing kept in git),
and prints one markdown row per target from libFuzzer's final stats line.

    python3 scripts/faults/fuzz_campaign.py [--seconds 600] [--targets parse_request,...]

Stable toolchain: `RUSTC_BOOTSTRAP=1` lets it accept the `-Z` flags cargo-fuzz passes; no
sanitizer (`-s none`: the crate denies `unsafe`). Needs `cargo install cargo-fuzz`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FUZZ = REPO / "crates" / "kvrouter" / "fuzz"

from kvfaults.msgpack import pack  # noqa: E402

TARGETS = ("parse_request", "decode_sglang", "decode_dynamo")
# libFuzzer's last status line: "#123456	DONE   cov: 812 ft: 2301 corp: 410/21Kb lim: 4096 exec/s: 4115 rss: 80Mb"
_STATS = re.compile(r"#(\d+)\s+(DONE|pulse|NEW|REDUCE|INITED)\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)"
                    r"(?:.*?exec/s: (\d+))?(?:.*?rss: (\d+)Mb)?")


def seeds(target: str) -> list[bytes]:
    if target == "parse_request":
        bodies = [
            {"input_ids": list(range(1, 40)), "stream": True, "rid": "r1", "sampling_params": {"max_new_tokens": 4}},
            {"input_ids": [[1, 2, 3], [4, 5]], "rid": ["a", "b"]},
            {"text": "hello", "routed_dp_rank": 1},
            {"text": ["a", "b"]},
            {"input_embeds": [[0.1, 0.2]]},
            {"model": "m", "messages": [{"role": "user", "content": "hi"},
                                        {"role": "assistant", "content": [{"type": "text", "text": "x"}]}]},
            {"model": "m", "prompt": "once upon", "stream": False},
            {"model": "m", "prompt": [1, 2, 3]},
            {"model": "m", "prompt": [[1, 2], [3]]},
        ]
        out = [json.dumps(b).encode() for b in bodies]
        out.append(b'{"input_ids":[1,2],"x":"\\ud83d\\ude00","y":{"z":[1e3,null,true]}}')
        return out
    if target == "decode_sglang":
        stored = ["BlockStored", [-5, 7], 3, list(range(8)), 4, None, "GPU"]
        removed = {"type": "BlockRemoved", "block_hashes": [b"\x01" * 8]}
        return [pack([1.0, [stored, removed, ["AllBlocksCleared"]], 0]),
                pack([2.5, [["BlockStored", [1], None, [1, 2, 3, 4], 4, None]], None]),
                pack([3.0, [["BlockRemoved", [1, 2]]]])]
    if target == "decode_dynamo":
        ev = {"worker_id": 7, "event": {"event_id": 3, "dp_rank": 1,
                                        "data": {"stored": {"parent_hash": 1, "blocks": [{"block_hash": 2, "tokens_hash": 3}]}}}}
        rm = {"worker_id": 7, "event": {"event_id": 4, "data": {"removed": {"block_hashes": [2]}}}}
        return [json.dumps(ev).encode(), json.dumps(rm).encode(), pack(ev), pack(rm),
                json.dumps({"worker_id": 1, "event": {"event_id": 5, "data": "cleared"}}).encode()]
    raise ValueError(target)


def parse_stats(log: str) -> dict:
    """The last libFuzzer status line's figures, and whether it found a crash."""
    last = None
    for m in _STATS.finditer(log):
        last = m
    out: dict = {"crash": bool(re.search(r"==\d+== ERROR|panicked at|deadly signal|Test unit written to", log))}
    if last:
        out.update({"executions": int(last.group(1)), "coverage": int(last.group(3)),
                    "features": int(last.group(4)), "corpus_units": int(last.group(5)),
                    "corpus_size": last.group(6),
                    "exec_per_s": int(last.group(7)) if last.group(7) else None,
                    "rss_mb": int(last.group(8)) if last.group(8) else None})
    return out


def row(target: str, seconds: int, s: dict) -> str:
    findings = "**crash** (see artifacts)" if s.get("crash") else "none"
    return (f"| `{target}` | {seconds} | {s.get('executions', 0):,} | {s.get('exec_per_s') or '-'} | "
            f"{s.get('coverage', '-')} / {s.get('features', '-')} | {s.get('corpus_units', '-')} ({s.get('corpus_size', '-')}) | "
            f"{findings} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=600, help="libFuzzer -max_total_time per target")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--target-dir", default=str(REPO / "target" / "fuzz"), help="CARGO_TARGET_DIR of the fuzz build")
    ap.add_argument("--out", default=str(REPO / "target" / "fuzz-campaign"), help="logs and stats JSON")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, RUSTC_BOOTSTRAP="1", CARGO_TARGET_DIR=a.target_dir)
    lines = ["| target | seconds | executions | exec/s | coverage (cov / ft) | corpus (units, size) | findings |",
             "|---|---|---|---|---|---|---|"]
    results = {}
    for t in [x.strip() for x in a.targets.split(",") if x.strip()]:
        corpus = FUZZ / "corpus" / t
        corpus.mkdir(parents=True, exist_ok=True)
        for i, seed in enumerate(seeds(t)):
            (corpus / f"seed-{i}").write_bytes(seed)
        log = out / f"{t}.log"
        t0 = time.monotonic()
        with open(log, "w") as f:
            rc = subprocess.call(["cargo", "fuzz", "run", "-s", "none", t, "--", f"-max_total_time={a.seconds}",
                                  "-print_final_stats=1"], cwd=FUZZ, env=env, stdout=f, stderr=subprocess.STDOUT)
        s = parse_stats(log.read_text(errors="replace"))
        s.update({"rc": rc, "wall_s": round(time.monotonic() - t0, 1), "loadavg_1m": round(os.getloadavg()[0], 1)})
        results[t] = s
        lines.append(row(t, a.seconds, s))
        print(lines[-1], flush=True)
    (out / "stats.json").write_text(json.dumps(results, indent=2))
    print("\n".join(lines))
    return 1 if any(r.get("crash") or r["rc"] != 0 for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
