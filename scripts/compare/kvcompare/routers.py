"""The routers under test: how to launch each in front of a fleet and know it is ready."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import httpc
from .procs import Proc, free_port


@dataclass(frozen=True)
class RouterSpec:
    name: str          # label in tables and charts
    family: str        # kvrouter | sglr | smg
    args: tuple = ()   # policy/mode flags

    def describe(self) -> str:
        return " ".join(self.args)


KVROUTER = [
    RouterSpec("kvrouter kv", "kvrouter", ("--mode", "kv")),
    RouterSpec("kvrouter kv no-predict", "kvrouter", ("--mode", "kv", "--no-predict")),
    # Every prediction in full for the whole TTL (the default before issue 28 made the learned
    # credit the default).
    RouterSpec("kvrouter kv full-credit", "kvrouter", ("--mode", "kv", "--predict-credit", "full")),
    RouterSpec("kvrouter least-load", "kvrouter", ("--mode", "least-load")),
    RouterSpec("kvrouter round-robin", "kvrouter", ("--mode", "round-robin")),
]
SGLR = [
    RouterSpec("sgl-router cache_aware", "sglr", ("--policy", "cache_aware")),
    RouterSpec("sgl-router round_robin", "sglr", ("--policy", "round_robin")),
]
SMG = [
    RouterSpec("smg cache_aware", "smg", ("--policy", "cache_aware")),
    RouterSpec("smg cache_aware ttl", "smg", ("--policy", "cache_aware", "--selection-accounting-ttl-ms", "2000")),
    RouterSpec("smg round_robin", "smg", ("--policy", "round_robin")),
]
# Learned credit spelled out (the default now, `kvrouter kv`): the name earlier results and
# their reproduce commands use.
EXTRA = [RouterSpec("kvrouter kv learned-credit", "kvrouter", ("--mode", "kv", "--predict-credit", "learned"))]
ALL = KVROUTER + SGLR + SMG + EXTRA
# Not a router: loadgen straight at one worker holding the whole fleet's KV and running N times
# as fast, i.e. one shared cache of the fleet's size (the trace's reuse bound; for sibling bursts
# it is not an upper bound, since identical prompts admitted in one prefill batch do not share).
REFERENCE = RouterSpec("reference: one shared cache", "reference", ())
# The pressure suite (issue 10): every kvrouter mode and each peer's cache_aware; `--quick` runs
# kvrouter kv and round-robin next to the peers.
PRESSURE = KVROUTER + [SGLR[0], SMG[0]]
PRESSURE_QUICK = [KVROUTER[0], KVROUTER[4], SGLR[0], SMG[0]]
GROUPS = {"kvrouter": KVROUTER, "peers": SGLR + SMG, "sglr": SGLR, "smg": SMG, "all": ALL,
          "demo": [KVROUTER[0], KVROUTER[3]], "pressure": PRESSURE, "pressure-quick": PRESSURE_QUICK}


def select(only: str | None, default: list[RouterSpec] = ALL) -> list[RouterSpec]:
    """`--only` accepts group names (kvrouter, peers, sglr, smg, demo, pressure, pressure-quick, all)
    and/or router names (comma separated; spaces in names may be written as '-' or '_', e.g.
    kvrouter-kv-no-predict). Without `--only`: `default`."""
    if not only:
        return list(default)
    picked: list[RouterSpec] = []
    for token in (t.strip() for t in only.split(",") if t.strip()):
        norm = token.replace("_", " ").replace("-", " ").lower()
        if token in GROUPS:
            cands = GROUPS[token]
        else:
            cands = [r for r in ALL if r.name.replace("_", " ").replace("-", " ").lower() == norm]
        if not cands:
            names = ", ".join(sorted(GROUPS)) + "; " + ", ".join(r.name for r in ALL)
            raise SystemExit(f"--only: unknown router or group {token!r} (known: {names})")
        picked.extend(r for r in cands if r not in picked)
    return picked


@dataclass
class Launch:
    """Paths and settings shared by every launch."""
    router_bin: Path
    sglr_venv: Path | None
    smg_venv: Path | None
    model_dir: Path
    page_size: int
    log_dir: Path
    extra: dict = field(default_factory=dict)


def start(spec: RouterSpec, worker_urls: list[str], launch: Launch, tag: str,
          worker_args: list[str] | None = None) -> tuple[Proc, str]:
    """Starts `spec` in front of `worker_urls`; returns the process and its base URL once it routes.
    `worker_args` replaces `--worker-urls URL...` (a PD fleet's `--pd-disaggregation --prefill ...`,
    flags the three routers share)."""
    log = launch.log_dir / f"router-{tag}.log"
    workers = worker_args if worker_args is not None else ["--worker-urls", *worker_urls]
    # A PD router's readiness counts roles its own way: the probe through both legs decides.
    n_ready = len(worker_urls) if worker_args is None or "--pd-disaggregation" not in worker_args else 0
    if spec.family == "kvrouter":
        argv = [str(launch.router_bin), *spec.args, "--page-size", str(launch.page_size),
                "--host", "127.0.0.1", "--port", "0", "--log-level", "warn",
                # Its /metrics is on the main port; no second listener to clash on 29000.
                "--prometheus-port", "0",
                # As the peers get it: the tokenizer KV mode uses for text requests.
                "--model-path", str(launch.model_dir), *workers]
        p = Proc(spec.name, argv, log)
        try:
            url = p.wait_listening(60)
            _wait_routable(p, url, n_ready)
        except BaseException:
            p.stop()
            raise
        return p, url

    port, prom = free_port(), free_port()
    common = ["--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1",
              "--prometheus-port", str(prom), "--log-level", "warn", "--model-path", str(launch.model_dir),
              *spec.args, *workers]
    if spec.family == "sglr":
        assert launch.sglr_venv is not None
        argv = [str(launch.sglr_venv / "bin" / "python"), "-m", "sglang_router.launch_router", *common]
    elif spec.family == "smg":
        assert launch.smg_venv is not None
        argv = [str(launch.smg_venv / "bin" / "smg"), "launch", *common]
    else:
        raise ValueError(spec.family)
    # Never let a peer reach for the Hugging Face hub; the model dir is local.
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_COLOR": "1"}
    p = Proc(spec.name, argv, log, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        httpc.wait_until(lambda: httpc.request("GET", url + "/health", timeout=1)[0] == 200,
                         90, f"{spec.name} /health", proc=p)
        _wait_routable(p, url, n_ready)
    except BaseException:
        p.stop()
        raise
    return p, url


def _wait_routable(p: Proc, url: str, n_workers: int) -> None:
    """Ready = /readiness reports every worker healthy (where the router has it) and a probe
    /generate succeeds. The probe's KV footprint is flushed before the measured run."""
    def all_healthy() -> bool:
        status, body = httpc.request("GET", url + "/readiness", timeout=2)
        if status == 404:
            return True  # no readiness route: rely on the probe
        if status != 200:
            return False
        try:
            import json
            j = json.loads(body)
        except ValueError:
            return True
        healthy = j.get("healthy_workers", n_workers) if isinstance(j, dict) else n_workers
        return healthy >= n_workers

    httpc.wait_until(all_healthy, 60, f"{p.name} /readiness with {n_workers} healthy workers", proc=p,
                     interval=0.2)
    probe = {"input_ids": list(range(1, 33)), "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    httpc.wait_until(lambda: httpc.request("POST", url + "/generate", probe, timeout=10)[0] == 200,
                     60, f"{p.name} to serve a probe /generate", proc=p, interval=0.2)
