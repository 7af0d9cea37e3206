"""The loadgen workloads (grpo, agent, Mooncake trace) at quick / full / demo size, and how
to read loadgen's summary JSON tolerantly."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .fleet import FleetSpec

TRACE = Path("/work/shared/traces/conversation_trace.jsonl")


@dataclass
class Workload:
    name: str
    fleet: FleetSpec
    argv: list[str]                  # loadgen subcommand + its flags (no --url / --json)
    timeout_s: float = 600
    notes: str = ""
    extra: dict = field(default_factory=dict)


def build(size: str, trace: Path, seed: int = 7) -> list[Workload]:
    """size: quick (seconds, smoke), demo (README command scale), full (the published report)."""
    s = ["--seed", str(seed)]
    if size == "quick":
        fleet = FleetSpec(workers=2, speedup=20, max_total_tokens=1 << 18)
        return [
            Workload("grpo", fleet, ["grpo", "--groups", "4", "--samples", "8", "--prompt-len", "512",
                                     "--shared-prefix", "128", "--output-len", "16", "--concurrency", "2", *s],
                     timeout_s=120),
            Workload("agent", fleet, ["agent", "--sessions", "4", "--turns", "3", "--turn-tokens", "256",
                                      "--output-len", "16", "--concurrency", "4", *s], timeout_s=120),
            Workload("trace", FleetSpec(workers=2, speedup=50, max_total_tokens=1 << 18),
                     ["trace", "--trace", str(trace), "--time-scale", "50", "--max-requests", "40", *s],
                     timeout_s=120),
        ]
    if size == "demo":
        fleet = FleetSpec(workers=4, speedup=10, max_total_tokens=1 << 19)
        return [
            Workload("grpo", fleet, ["grpo", "--groups", "8", "--samples", "32", "--prompt-len", "2048",
                                     "--shared-prefix", "512", "--output-len", "64", "--concurrency", "2", *s],
                     timeout_s=180),
            Workload("agent", fleet, ["agent", "--sessions", "16", "--turns", "5", "--turn-tokens", "1024",
                                      "--output-len", "64", "--concurrency", "16", *s], timeout_s=180),
        ]
    if size == "full":
        fleet = FleetSpec(workers=4, speedup=10, max_total_tokens=1 << 20)
        return [
            Workload("grpo", fleet, ["grpo", "--groups", "32", "--samples", "32", "--prompt-len", "4096",
                                     "--shared-prefix", "1024", "--output-len", "128", "--concurrency", "4", *s],
                     timeout_s=600),
            Workload("agent", fleet, ["agent", "--sessions", "32", "--turns", "8", "--turn-tokens", "2048",
                                      "--output-len", "128", "--concurrency", "32", *s], timeout_s=600),
            # First 12 minutes of the one-hour trace (~2,400 requests) at 6x: ~2 min of wall clock
            # with the mocks' simulated time running 6x as fast, i.e. the trace's real load.
            Workload("trace", FleetSpec(workers=4, speedup=6, max_total_tokens=1 << 20),
                     ["trace", "--trace", str(trace), "--time-scale", "6", "--max-duration", "720", *s],
                     timeout_s=600),
        ]
    raise ValueError(size)


# --- reading loadgen's summary -------------------------------------------------------------

_ALIASES = {
    "requests": ["requests", "total_requests", "count", "n"],
    "errors": ["errors", "failed", "error_count", "failures"],
    "duration_s": ["duration_s", "elapsed_s", "wall_s", "duration"],
    "req_per_s": ["req_per_s", "requests_per_s", "throughput_rps", "rps", "request_throughput"],
    "out_tok_per_s": ["output_tokens_per_s", "out_tok_per_s", "output_throughput", "tokens_per_s"],
    "prompt_tokens": ["prompt_tokens", "total_prompt_tokens", "input_tokens"],
    "cached_tokens": ["cached_tokens", "total_cached_tokens"],
    "hit_rate": ["hit_rate", "prefix_hit_rate", "cache_hit_rate"],
}
_LAT = {"ttft": ["ttft_ms", "ttft", "time_to_first_token_ms"],
        "e2e": ["e2e_ms", "latency_ms", "e2e", "e2e_latency_ms", "latency"]}


def _find(obj, keys: list[str]):
    """Depth-first search for the first of `keys` in nested dicts."""
    if isinstance(obj, dict):
        for k in keys:
            if k in obj and not isinstance(obj[k], (dict, list)):
                return obj[k]
        for v in obj.values():
            r = _find(v, keys)
            if r is not None:
                return r
    return None


def _find_dict(obj, keys: list[str]):
    if isinstance(obj, dict):
        for k in keys:
            if isinstance(obj.get(k), dict):
                return obj[k]
        for v in obj.values():
            r = _find_dict(v, keys)
            if r is not None:
                return r
    return None


def _pct(d: dict | None, p: str, scale: float) -> float | None:
    if not d:
        return None
    for k in (p, p.replace("p", "p_"), p.upper(), p.replace("p", "") ):
        if k in d and isinstance(d[k], (int, float)):
            return float(d[k]) * scale
    return None


def summarize(raw: dict) -> dict:
    """Normalises loadgen's JSON to the harness's keys; None where loadgen did not report."""
    out = {k: _find(raw, a) for k, a in _ALIASES.items()}
    if out["hit_rate"] is None and out["prompt_tokens"]:
        out["hit_rate"] = (out["cached_tokens"] or 0) / out["prompt_tokens"]
    if isinstance(out["hit_rate"], (int, float)) and out["hit_rate"] > 1.0:
        out["hit_rate"] = out["hit_rate"] / 100.0  # reported in percent
    for lat, keys in _LAT.items():
        d = _find_dict(raw, keys)
        # Values in seconds when the key says so, else milliseconds.
        scale = 1000.0 if d is not None and any(k.endswith("_s") for k in (keys[0],)) else 1.0
        for p in ("p50", "p90", "p99", "mean"):
            out[f"{lat}_{p}_ms"] = _pct(d, p, scale)
    workers = _find_dict(raw, ["per_worker", "workers", "by_worker"])
    if workers:
        out["per_worker"] = {k: (v if isinstance(v, (int, float)) else _find(v, ["requests", "count"]))
                             for k, v in workers.items()}
    return out


def load_summary(path: Path) -> dict:
    return json.loads(path.read_text())
