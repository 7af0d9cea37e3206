"""The pressure suite's cases (kvrouter issue 10): five workloads, each at two fleet capacities
(`fits`: the working set fits in the fleet's KV; `over`: it is 4-10x over), at `full` or
`quick` size. A case is a fleet shape plus the loadgen process(es) run on it; every loadgen
gets `--sim-speedup S` equal to the fleet's `--speedup S`, so it reports simulated time."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from .. import presets
from ..fleet import FleetSpec
from ..measure import Part

WORKLOADS = ("trace", "grpo", "tenants", "agent", "mix")
CAPACITIES = ("fits", "over")

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
    """`[pressure.full]` of workloads/presets.toml."""
    t = presets.suite("pressure", "full")
    w, timeout = t["workers"], t["timeout_s"]
    tail = ["--max-duration-secs", str(t["max_duration_secs"])]
    cases: list[Case] = []
    # (1) The conversation trace on the fleets of Dynamo's own replay (8 x 256 Ki, 8 x 1 Mi).
    c = t["trace"]
    n = c["max_requests"] if trace_requests is None else trace_requests
    s = c["speedup"]
    for cap, kv in c["kv"].items():
        argv = [*presets.argv(c["preset"], trace=trace, max_requests=n or 1_000_000), *tail, *_common(seed, s)]
        cases.append(Case("trace", cap, FleetSpec(workers=w, speedup=s, max_total_tokens=kv),
                          [Part("trace", argv, records=True)], timeout_s=timeout,
                          working_set_tokens=trace_unique_tokens(trace, n),
                          notes=f"first {n or 'all'} requests of the trace at their arrival times"))
    # (2) GRPO rollout batches shaped like miles' (non-streaming).
    c = t["grpo"]
    s = c["speedup"]
    rollout = [*presets.argv(c["preset"]), *tail, *_common(seed, s, stream=False)]
    for cap, kv in c["kv"].items():
        cases.append(Case("grpo", cap, FleetSpec(workers=w, speedup=s, max_total_tokens=kv),
                          [Part("rollout", rollout, records=True)], timeout_s=timeout,
                          working_set_tokens=2_500_000, notes="per batch: 256 x 4.6k prompt + 2048 x ~660 output"))
    # (3) Multi-tenant: Poisson arrivals at `load` of each fleet's capacity, `arrival_secs` of
    # simulated arrivals.
    c = t["tenants"]
    s = c["speedup"]
    for cap, kv in c["kv"].items():
        rate = tenants_rate(w, kv, *_tenants_prompt_and_output(c["preset"]), load=c["load"])
        tenants = [*presets.argv(c["preset"], rate=f"{rate:g}", requests=int(rate * c["arrival_secs"])), *tail,
                   *_common(seed, s)]
        cases.append(Case("tenants", cap, FleetSpec(workers=w, speedup=s, max_total_tokens=kv),
                          [Part("tenants", tenants, records=True)], timeout_s=timeout,
                          working_set_tokens=256 * 5120, notes=f"Poisson {rate:g} req/s"))
    # (4) Long agent sessions: 128 x 20 turns growing past 32k tokens, exponential think time.
    c = t["agent"]
    s = c["speedup"]
    agent = _agent_argv(c["preset"], None, seed, s, t)
    for cap, kv in c["kv"].items():
        cases.append(Case("agent", cap, FleetSpec(workers=w, speedup=s, max_total_tokens=kv),
                          [Part("agent", agent, records=True)], timeout_s=timeout,
                          working_set_tokens=128 * AGENT_CONTEXT))
    # (5) GRPO and agent traffic at once: half of each, on the agent's fleets.
    c = t["mix"]
    s = c["speedup"]
    half_rollout = [*presets.argv(c["preset"], prompts=c["prompts"]), *tail, *_common(seed, s, stream=False)]
    for cap, kv in c["kv"].items():
        cases.append(Case("mix", cap, FleetSpec(workers=w, speedup=s, max_total_tokens=kv),
                          [Part("rollout", half_rollout, records=True),
                           Part("agent", _agent_argv(c["agent"], c["sessions"], seed + 1, s, t), records=True)],
                          timeout_s=timeout, working_set_tokens=1_250_000 + 64 * AGENT_CONTEXT))
    return cases


def _tenants_prompt_and_output(preset: str) -> tuple[float, int]:
    """A tenants preset's mean prompt (mean system prompt + suffix) and output tokens."""
    f = functools.partial(presets.flag, preset, rate="0", requests="0")
    system = (int(f("--system-len-min")) + int(f("--system-len-max"))) / 2
    return system + int(f("--suffix-len")), int(f("--max-new-tokens"))


def _agent_context(preset: str) -> int:
    """A session's context after its last turn: system + first prompt, then per turn the tool
    output and the model's output."""
    f = functools.partial(presets.flag, preset)
    return (int(f("--system-prefix-len")) + int(f("--first-prompt-len"))
            + int(f("--turns")) * (int(f("--tool-output-len")) + int(f("--max-new-tokens"))))


AGENT_CONTEXT = _agent_context("pressure-agent")  # 2048 + 1024 + 20 * (1536 + 128)


def _agent_argv(preset: str, sessions: int | None, seed: int, s: float, t: dict) -> list[str]:
    """The agent preset (with `sessions` sessions, else its own) streaming at speedup `s`."""
    values = {} if sessions is None else {"sessions": sessions}
    return [*presets.argv(preset, **values), "--max-duration-secs", str(t["max_duration_secs"]), *_common(seed, s)]


def _quick(trace: Path, seed: int) -> list[Case]:
    """`[pressure.quick]`: tiny shapes of every workload: checks that each row runs, not the numbers."""
    t = presets.suite("pressure", "quick")
    w, timeout = t["workers"], t["timeout_s"]
    tail = ["--max-duration-secs", str(t["max_duration_secs"])]
    cases: list[Case] = []
    c = t["trace"]
    s = c["speedup"]
    for cap, kv in c["kv"].items():  # trace prompts reach 87k tokens
        argv = [*presets.argv(c["preset"], trace=trace), *tail, *_common(seed, s)]
        cases.append(Case("trace", cap, FleetSpec(workers=w, speedup=s, max_total_tokens=kv),
                          [Part("trace", argv, records=True)], timeout_s=timeout,
                          working_set_tokens=trace_unique_tokens(trace, 40)))
    g, ten, ag, mx = t["grpo"], t["tenants"], t["agent"], t["mix"]
    rollout = [*presets.argv(g["preset"]), *tail, *_common(seed, g["speedup"], stream=False)]
    tenants = [*presets.argv(ten["preset"]), *tail, *_common(seed, ten["speedup"])]
    agent = _agent_argv(ag["preset"], None, seed, ag["speedup"], t)
    mix_rollout = [*presets.argv(mx["preset"], prompts=mx["prompts"]), *tail, *_common(seed, mx["speedup"], stream=False)]
    mix_agent = _agent_argv(mx["agent"], None, seed, mx["speedup"], t)
    # The four share each capacity's fleet (one speedup for all of them).
    for cap in CAPACITIES:
        fl = FleetSpec(workers=w, speedup=g["speedup"], max_total_tokens=g["kv"][cap])
        assert all(x["speedup"] == g["speedup"] and x["kv"][cap] == g["kv"][cap] for x in (ten, ag, mx)), cap
        cases.append(Case("grpo", cap, fl, [Part("rollout", rollout, records=True)], timeout, 8 * 640 + 32 * 24))
        cases.append(Case("tenants", cap, fl, [Part("tenants", tenants, records=True)], timeout, 8 * 640))
        cases.append(Case("agent", cap, fl, [Part("agent", agent, records=True)], timeout, 4 * 1500))
        cases.append(Case("mix", cap, fl, [Part("rollout", mix_rollout, records=True),
                                           Part("agent", mix_agent, records=True)], timeout, 4 * 640 + 4 * 1500))
    return cases
