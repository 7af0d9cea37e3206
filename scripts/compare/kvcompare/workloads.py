"""The loadgen workloads (grpo, agent, Mooncake trace) at quick / full / demo size, and how
to read loadgen's summary JSON tolerantly."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import presets
from .fleet import FleetSpec

# The Mooncake FAST'25 conversation trace (kvcache-ai/Mooncake, `FAST25-release/traces/`): by
# default `../shared/traces/` next to the checkout, or wherever $KVROUTER_TRACE (or --trace) says.
REPO = Path(__file__).resolve().parent.parent.parent.parent
TRACE = Path(os.environ.get("KVROUTER_TRACE") or REPO.parent / "shared" / "traces" / "conversation_trace.jsonl")


@dataclass
class Workload:
    name: str
    fleet: FleetSpec
    argv: list[str]                  # loadgen subcommand + its flags (no --url / --json)
    timeout_s: float = 600
    notes: str = ""
    extra: dict = field(default_factory=dict)


def build(size: str, trace: Path, seed: int = 7, model: str = "default") -> list[Workload]:
    """The workloads of `size` plus `agent-text`: each agent workload again with OpenAI text
    messages and no `input_ids` (issue 11: text routing), on a fleet whose mocks tokenize text.
    `model` is the chat requests' `model` (the workers' model path: SMG routes by it)."""
    wls = _build(size, trace, seed)
    return wls + [text_twin(w, model) for w in wls if w.name == "agent"]


def text_twin(w: Workload, model: str) -> Workload:
    """`w` (an agent workload) sending chat messages as text: same sessions, same seed."""
    argv = list(w.argv)
    i = argv.index("--endpoint")
    argv[i + 1] = "chat"
    argv += ["--text", "--model", model]
    return Workload("agent-text", replace(w.fleet, extra_args=list(w.fleet.extra_args), text=True), argv, timeout_s=w.timeout_s,
                    notes="the agent sessions as OpenAI text (no input_ids); mocks tokenize with --tokenizer-path")


def _build(size: str, trace: Path, seed: int = 7) -> list[Workload]:
    """size: quick (seconds, smoke), demo (README command scale), full (the published report):
    `[compare.SIZE]` of workloads/presets.toml.

    Every workload streams (TTFT = first SSE chunk) and uses /generate with `input_ids`: the peers
    route /generate by the ids rendered as text, so all routers see the same prefix structure.
    The trace runs the mocks' simulated clock `speedup` times faster than real time and replays
    the trace's timestamps `speedup` times faster (`--time-scale 1/speedup`): the fleet sees the
    trace's real load, compressed in wall time."""
    if size not in presets.suite("compare"):
        raise ValueError(size)
    t = presets.suite("compare", size)
    common = ["--stream", "--endpoint", "generate", "--seed", str(seed), "--no-logprob"]
    fleet = FleetSpec(**t["fleet"])
    return [Workload(w["name"], FleetSpec(**w["fleet"]) if "fleet" in w else fleet,
                     [*presets.argv(w["preset"], trace=trace), "--max-duration-secs", str(t["max_duration_secs"]),
                      *common],
                     timeout_s=t["timeout_s"])
            for w in t["workloads"]]


# --- reading loadgen's summary -------------------------------------------------------------

def summarize(raw: dict) -> dict:
    """loadgen's `--json` summary (src/sim/loadgen/report.rs `Summary`) -> the harness's flat keys."""
    req = raw.get("requests") or {}
    thr = raw.get("throughput") or {}
    tok = raw.get("tokens") or {}
    out = {
        "requests": req.get("total"),
        "ok": req.get("ok"),
        "errors": (req.get("failed") or 0) + (req.get("cancelled") or 0),
        "duration_s": raw.get("duration_secs"),
        "req_per_s": thr.get("requests_per_sec"),
        "out_tok_per_s": thr.get("output_tokens_per_sec"),
        "prompt_tokens": tok.get("prompt_reported"),
        "cached_tokens": tok.get("cached"),
        "hit_rate": raw.get("prefix_hit_rate"),
    }
    for lat in ("ttft", "e2e"):
        d = raw.get(f"{lat}_ms") or {}
        for p in ("p50", "p90", "p99", "mean", "max"):
            out[f"{lat}_{p}_ms"] = d.get(p)
    mk = raw.get("makespan_secs")
    if isinstance(mk, dict):  # loadgen rollout: per-batch makespans
        for k in ("mean", "max", "total"):
            out[f"makespan_{k}_s"] = mk.get(k)
        out["batch_makespans_s"] = [b.get("makespan_secs") for b in raw.get("batches") or [] if isinstance(b, dict)]
    pw = raw.get("per_worker") or []
    if pw and not (len(pw) == 1 and pw[0].get("worker") == "direct"):
        out["per_worker"] = {w.get("worker"): w.get("requests") for w in pw}
    if raw.get("errors"):
        out["error_messages"] = raw["errors"]
    return out


def load_summary(path: Path) -> dict:
    return json.loads(path.read_text())


QUANTILES = [i / 100 for i in range(101)]


def _quantiles(xs: list[float]) -> list[float]:
    xs = sorted(xs)
    n = len(xs)
    return [xs[min(n - 1, int(round(q * (n - 1))))] for q in QUANTILES]


def records_digest(path: Path) -> dict:
    """loadgen `--records` (one JSON line per request) -> E2E and TTFT quantiles (0..100 %) of the
    ok requests, small enough to keep in the results file so CDF charts need nothing else."""
    e2e: list[float] = []
    ttft: list[float] = []
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if not isinstance(r, dict):
            continue
        total += 1
        if not (r.get("ok") is True or r.get("status") == "ok"):
            continue
        if isinstance(r.get("e2e_ms"), (int, float)):
            e2e.append(float(r["e2e_ms"]))
        if isinstance(r.get("ttft_ms"), (int, float)):
            ttft.append(float(r["ttft_ms"]))
    out: dict = {"records": total}
    if e2e:
        out["e2e_quantiles_ms"] = _quantiles(e2e)
    if ttft:
        out["ttft_quantiles_ms"] = _quantiles(ttft)
    return out


def combine(parts: dict[str, dict], latency_part: str | None = None, makespan_part: str | None = None) -> dict:
    """Summaries of loadgen processes run at once on one fleet -> one summary: counts and tokens
    summed (hit rate = cached / prompt over both), latency keys from `latency_part`, makespan keys
    from `makespan_part` (defaults: the first part)."""
    names = list(parts)
    if not names:
        return {}
    lat = parts.get(latency_part or names[0], {})
    mk = parts.get(makespan_part or names[0], {})
    out: dict = {}
    for k in ("requests", "ok", "errors", "prompt_tokens", "cached_tokens", "req_per_s", "out_tok_per_s"):
        vals = [p.get(k) for p in parts.values() if p.get(k) is not None]
        out[k] = sum(vals) if vals else None
    out["duration_s"] = max((p.get("duration_s") or 0) for p in parts.values())
    if out["prompt_tokens"]:
        out["hit_rate"] = (out["cached_tokens"] or 0) / out["prompt_tokens"]
    else:
        vals = [p["hit_rate"] for p in parts.values() if p.get("hit_rate") is not None]
        out["hit_rate"] = sum(vals) / len(vals) if vals else None
    for k, v in lat.items():
        if k.startswith(("ttft_", "e2e_")):
            out[k] = v
    for k, v in mk.items():
        if k.startswith(("makespan_", "batch_makespans")):
            out[k] = v
    return out
