"""The pressure suite's cases (kvrouter issue 10): five workloads, each at two fleet capacities
(`fits`: the working set fits in the fleet's KV; `over`: it is 4-10x over), at `full` or
`quick` size. A case is a fleet shape plus the loadgen process(es) run on it; every loadgen
gets `--sim-speedup S` equal to the fleet's `--speedup S`, so it reports simulated time."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..fleet import FleetSpec
from ..measure import Part

WORKLOADS = ("trace", "grpo", "tenants", "agent", "mix")
CAPACITIES = ("fits", "over")
KI = 1024
MI = 1024 * 1024

# Prefill cost of the mock's default (`poly`) timing model, Dynamo's SGLang fit:
# ms = a*t^2 + b*t + c for t uncached tokens (crates/sim mock `--prefill-coeffs` default).
PREFILL_POLY = (4.209989e-7, 1.518344e-2, 16.50142)


def cold_prefill_ms(tokens: float) -> float:
    a, b, c = PREFILL_POLY
    return a * tokens * tokens + b * tokens + c


# Decode step of the poly model at half KV utilisation: ms = a*u^2 + b*u + c (`--decode-coeffs`).
DECODE_POLY = (-25.74, 54.01, 5.74)


def decode_step_ms(util: float = 0.5) -> float:
    a, b, c = DECODE_POLY
    return max(1.0, a * util * util + b * util + c)


def tenants_rate(workers: int, kv_per_worker: int, mean_prompt: float, output: int, load: float = 0.7) -> float:
    """Poisson rate (requests per simulated second) at `load` of the fleet's capacity when no prompt
    token is reused. A worker's capacity is the lower of its prefill bound (one cold prefill of the
    mean prompt at a time) and its KV bound (requests that fit in its KV at once, each resident for
    its prefill plus `output` decode steps at half utilisation). A router that reuses the tenants'
    system prompts has headroom; one that does not runs near saturation."""
    prefill = cold_prefill_ms(mean_prompt)
    resident_s = (prefill + output * decode_step_ms()) / 1000.0
    kv_bound = (kv_per_worker / (mean_prompt + output)) / resident_s
    per_worker = min(1000.0 / prefill, kv_bound)
    return round(load * workers * per_worker, 1)


def trace_unique_tokens(trace: Path, n: int | None, block: int = 512) -> int:
    """Distinct prefix tokens of the trace's first `n` entries (all when n is falsy): its working set."""
    ids: set = set()
    try:
        with open(trace) as f:
            for i, line in enumerate(f):
                if n and i >= n:
                    break
                try:
                    ids.update(json.loads(line).get("hash_ids") or [])
                except (ValueError, AttributeError):
                    continue
    except OSError:
        return 0
    return len(ids) * block


@dataclass
class Case:
    workload: str                 # one of WORKLOADS
    capacity: str                 # fits | over
    fleet: FleetSpec              # the timing model is added per run
    parts: list[Part]
    timeout_s: float
    working_set_tokens: int       # estimate, for the report's "x over" column
    notes: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.workload}-{self.capacity}"

    def fleet_kv_tokens(self) -> int:
        return self.fleet.max_total_tokens * self.fleet.workers


def _common(seed: int, speedup: float, stream: bool = True) -> list[str]:
    return (["--stream"] if stream else []) + ["--endpoint", "generate", "--seed", str(seed), "--no-logprob",
                                                "--sim-speedup", f"{speedup:g}"]


def build(size: str, trace: Path, seed: int = 7, trace_requests: int | None = None) -> list[Case]:
    if size == "quick":
        return _quick(trace, seed)
    if size == "full":
        return _full(trace, seed, trace_requests)
    raise ValueError(size)


def _full(trace: Path, seed: int, trace_requests: int | None) -> list[Case]:
    w = 8
    cases: list[Case] = []
    # (1) The conversation trace on the fleets of Dynamo's own replay (8 x 256 Ki, 8 x 1 Mi).
    n = 2400 if trace_requests is None else trace_requests
    s = 10.0
    for cap, kv in (("over", 256 * KI), ("fits", 1 * MI)):
        argv = ["trace", "--file", str(trace), "--time-scale", "1", "--max-requests", str(n or 1_000_000),
                "--concurrency", "1024", "--max-duration-secs", "900", *_common(seed, s)]
        cases.append(Case("trace", cap, FleetSpec(workers=w, speedup=s, max_total_tokens=kv),
                          [Part("trace", argv, records=True)], timeout_s=1000,
                          working_set_tokens=trace_unique_tokens(trace, n),
                          notes=f"first {n or 'all'} requests of the trace at their arrival times"))
    # (2) GRPO rollout batches shaped like miles': 256 prompts x 8 samples, 1-8k-token prompts,
    # lognormal outputs capped at 4k, non-streaming, at most 128 in flight per engine. miles'
    # semaphore is sglang_server_concurrency (512) x engines, more than a batch; 2048 connections
    # opened at once were reset on loopback (listen backlog), so the cap is 1024 for the fleet.
    s = 10.0
    rollout = ["rollout", "--prompts", "256", "--samples", "8", "--batches", "2", "--prompt-len-min", "1024",
               "--prompt-len-max", "8192", "--system-prefix-len", "0", "--output-len-median", "400",
               "--output-len-sigma", "1.0", "--max-new-tokens", "4096", "--concurrency", str(128 * w),
               "--max-duration-secs", "900", *_common(seed, s, stream=False)]
    for cap, kv in (("fits", 1 * MI), ("over", 64 * KI)):
        cases.append(Case("grpo", cap, FleetSpec(workers=w, speedup=s, max_total_tokens=kv),
                          [Part("rollout", rollout, records=True)], timeout_s=1000,
                          working_set_tokens=2_500_000, notes="per batch: 256 x 4.6k prompt + 2048 x ~660 output"))
    # (3) Multi-tenant: 256 tenants, 2-8k system prompts, Zipf popularity, short suffixes,
    # Poisson arrivals at 70% of each fleet's capacity, ~90 s of simulated arrivals.
    s = 2.0
    for cap, kv in (("fits", 256 * KI), ("over", 32 * KI)):
        rate = tenants_rate(w, kv, 5120 + 256, 128)
        tenants = ["tenants", "--tenants", "256", "--system-len-min", "2048", "--system-len-max", "8192",
                   "--zipf-s", "1.0", "--suffix-len", "256", "--rate", f"{rate:g}", "--requests",
                   str(int(rate * 90)), "--max-new-tokens", "128", "--concurrency", "1024",
                   "--max-duration-secs", "900", *_common(seed, s)]
        cases.append(Case("tenants", cap, FleetSpec(workers=w, speedup=s, max_total_tokens=kv),
                          [Part("tenants", tenants, records=True)], timeout_s=1000,
                          working_set_tokens=256 * 5120, notes=f"Poisson {rate:g} req/s"))
    # (4) Long agent sessions: 128 x 20 turns growing past 32k tokens, exponential think time.
    s = 4.0
    agent = _agent_argv(128, seed, s)
    for cap, kv in (("fits", 1 * MI), ("over", 128 * KI)):
        cases.append(Case("agent", cap, FleetSpec(workers=w, speedup=s, max_total_tokens=kv),
                          [Part("agent", agent, records=True)], timeout_s=1000,
                          working_set_tokens=128 * AGENT_CONTEXT))
    # (5) GRPO and agent traffic at once: half of each, on the agent's fleets.
    half_rollout = ["rollout", "--prompts", "128", "--samples", "8", "--batches", "2", "--prompt-len-min", "1024",
                    "--prompt-len-max", "8192", "--system-prefix-len", "0", "--output-len-median", "400",
                    "--output-len-sigma", "1.0", "--max-new-tokens", "4096", "--concurrency", str(128 * w),
                    "--max-duration-secs", "900", *_common(seed, s, stream=False)]
    for cap, kv in (("fits", 1 * MI), ("over", 96 * KI)):
        cases.append(Case("mix", cap, FleetSpec(workers=w, speedup=s, max_total_tokens=kv),
                          [Part("rollout", half_rollout, records=True),
                           Part("agent", _agent_argv(64, seed + 1, s), records=True)], timeout_s=1000,
                          working_set_tokens=1_250_000 + 64 * AGENT_CONTEXT))
    return cases


AGENT_CONTEXT = 2048 + 1024 + 20 * (1536 + 128)  # a session's context after its last turn


def _agent_argv(sessions: int, seed: int, s: float) -> list[str]:
    # 2048 system + 1024 first prompt, then 20 turns of 1536 tool-output + 128 output tokens:
    # the context passes 32k tokens at turn ~18.
    return ["agent", "--sessions", str(sessions), "--turns", "20", "--system-prefix-len", "2048",
            "--first-prompt-len", "1024", "--tool-output-len", "1536", "--think-time-ms", "5000",
            "--max-new-tokens", "128", "--concurrency", str(sessions), "--max-duration-secs", "900",
            *_common(seed, s)]


def _quick(trace: Path, seed: int) -> list[Case]:
    """2 workers, tiny shapes of every workload: checks that each row runs, not the numbers."""
    w, s = 2, 20.0
    cases: list[Case] = []
    for cap, kv in (("over", 128 * KI), ("fits", 1 * MI)):  # trace prompts reach 87k tokens
        argv = ["trace", "--file", str(trace), "--time-scale", "1", "--max-requests", "40",
                "--max-new-tokens", "16", "--concurrency", "64", "--max-duration-secs", "60", *_common(seed, s)]
        cases.append(Case("trace", cap, FleetSpec(workers=w, speedup=s, max_total_tokens=kv),
                          [Part("trace", argv, records=True)], timeout_s=120,
                          working_set_tokens=trace_unique_tokens(trace, 40)))
    small = {"over": 2 * KI, "fits": 64 * KI}
    rollout = ["rollout", "--prompts", "8", "--samples", "4", "--batches", "2", "--prompt-len-min", "256",
               "--prompt-len-max", "1024", "--system-prefix-len", "0", "--output-len-median", "16",
               "--output-len-sigma", "0.5", "--max-new-tokens", "64", "--concurrency", "16",
               "--max-duration-secs", "60", *_common(seed, s, stream=False)]
    tenants = ["tenants", "--tenants", "8", "--system-len-min", "256", "--system-len-max", "1024", "--zipf-s", "1.0",
               "--suffix-len", "32", "--rate", "40", "--requests", "60", "--max-new-tokens", "16",
               "--concurrency", "32", "--max-duration-secs", "60", *_common(seed, s)]
    agent = ["agent", "--sessions", "4", "--turns", "4", "--system-prefix-len", "256", "--first-prompt-len", "128",
             "--tool-output-len", "256", "--think-time-ms", "200", "--max-new-tokens", "16", "--concurrency", "4",
             "--max-duration-secs", "60", *_common(seed, s)]
    mix_rollout = [*rollout[:2], "4", *rollout[3:]]
    for cap in CAPACITIES:
        fl = FleetSpec(workers=w, speedup=s, max_total_tokens=small[cap])
        cases.append(Case("grpo", cap, fl, [Part("rollout", rollout, records=True)], 120, 8 * 640 + 32 * 24))
        cases.append(Case("tenants", cap, fl, [Part("tenants", tenants, records=True)], 120, 8 * 640))
        cases.append(Case("agent", cap, fl, [Part("agent", agent, records=True)], 120, 4 * 1500))
        cases.append(Case("mix", cap, fl, [Part("rollout", mix_rollout, records=True),
                                           Part("agent", agent, records=True)], 120, 4 * 640 + 4 * 1500))
    return cases
