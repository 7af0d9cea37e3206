"""The `sglang-mock` fleet every router is measured in front of: start, health, flush, scrape."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import httpc, prom
from .procs import Proc, free_port


@dataclass
class FleetSpec:
    workers: int = 4
    page_size: int = 16
    speedup: float = 1.0
    max_total_tokens: int = 1 << 20
    extra_args: list[str] = field(default_factory=list)
    # Mocks tokenize text requests with the model dir's tokenizer (`--tokenizer-path`).
    text: bool = False
    # A heterogeneous fleet: the last `slow_workers` mocks run `slow_factor` times slower
    # (`--speedup speedup / slow_factor`); loadgen's simulated times stay the fast ones'.
    slow_workers: int = 0
    slow_factor: float = 1.0
    # PD disaggregation (docs/pd.md): the first `prefill` mocks run `--disaggregation-mode prefill`
    # (each with its own bootstrap port), the rest `--disaggregation-mode decode`. 0: aggregated.
    prefill: int = 0
    # PD fleets: decode mocks keep their own radix cache (`--disaggregation-decode-enable-radix-cache`;
    # the prefill then sends only the KV the decode does not hold).
    decode_radix: bool = False

    def role(self, i: int) -> str | None:
        """`prefill` / `decode` for mock `i` of a PD fleet, None in an aggregated one."""
        if not self.prefill:
            return None
        return "prefill" if i < self.prefill else "decode"

    def shape(self) -> str:
        """`2p6d` for a PD fleet, `8w` for an aggregated one."""
        if not self.prefill:
            return f"{self.workers}w"
        return f"{self.prefill}p{self.workers - self.prefill}d" + ("r" if self.decode_radix else "")

    def aggregated(self) -> "FleetSpec":
        """The same workers without roles: kvrouter's own aggregated mode on as many workers."""
        return replace(self, prefill=0, decode_radix=False, extra_args=list(self.extra_args))

    def worker_speedup(self, i: int) -> float:
        slow = self.slow_workers > 0 and i >= self.workers - self.slow_workers
        return self.speedup / self.slow_factor if slow else self.speedup

    def shared_cache(self) -> "FleetSpec":
        """The reference: ONE worker holding the whole fleet's KV and running N times as fast,
        i.e. a single shared cache of the fleet's size (same extra flags, e.g. timing model)."""
        return replace(self, workers=1, speedup=self.speedup * self.workers, slow_workers=0, prefill=0,
                       decode_radix=False,
                       max_total_tokens=self.max_total_tokens * self.workers, extra_args=list(self.extra_args))

    def describe(self) -> str:
        return (f"{self.workers} x sglang-mock --page-size {self.page_size} --speedup {self.speedup:g} "
                f"--max-total-tokens {self.max_total_tokens}" + (" --tokenizer-path MODEL" if self.text else "") + (" " + " ".join(self.extra_args)
                                                                 if self.extra_args else "")
                + (f" (last {self.slow_workers} with --speedup {self.speedup / self.slow_factor:g})"
                   if self.slow_workers else "")
                + (f" (PD {self.shape()}: the first {self.prefill} with --disaggregation-mode prefill "
                   f"--disaggregation-bootstrap-port PORT, the rest decode"
                   + (" --disaggregation-decode-enable-radix-cache" if self.decode_radix else "") + ")"
                   if self.prefill else ""))


class Fleet:
    def __init__(self, mock_bin: Path, spec: FleetSpec, model_dir: Path, log_dir: Path):
        self.spec = spec
        self.procs: list[Proc] = []
        self.urls: list[str] = []
        # PD fleets: each prefill mock's bootstrap port (None for decode / aggregated mocks).
        self.bootstrap_ports: list[int | None] = []
        try:
            for i in range(spec.workers):
                # SGLang binds (rather than connects) only endpoints with `*`; the mock binds `*` on
                # --host (127.0.0.1) and port 0 picks a free port, reported in /server_info.
                # replay_endpoint: a router that subscribes mid-run (or sees a gap) can catch up.
                kv_cfg = {"publisher": "zmq", "endpoint": "tcp://*:0", "replay_endpoint": "tcp://*:0",
                          "topic": "kv-events"}
                argv = [str(mock_bin), "--host", "127.0.0.1", "--port", "0",
                        "--page-size", str(spec.page_size), "--speedup", f"{spec.worker_speedup(i):g}",
                        "--max-total-tokens", str(spec.max_total_tokens),
                        # Trace prompts reach 126k tokens: let the context be the whole KV.
                        "--context-length", str(spec.max_total_tokens),
                        "--kv-events-config", json.dumps(kv_cfg),
                        "--model-path", str(model_dir), "--seed", str(1000 + i), *spec.extra_args]
                if spec.text:
                    argv += ["--tokenizer-path", str(model_dir)]
                role, port = spec.role(i), None
                if role == "prefill":
                    port = free_port()
                    argv += ["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(port)]
                elif role == "decode":
                    argv += ["--disaggregation-mode", "decode"]
                    if spec.decode_radix:
                        argv.append("--disaggregation-decode-enable-radix-cache")
                self.bootstrap_ports.append(port)
                p = Proc(f"mock{i}", argv, log_dir / f"mock{i}.log")
                self.procs.append(p)
            for p in self.procs:
                self.urls.append(p.wait_listening(60))
            for p, url in zip(self.procs, self.urls):
                httpc.wait_until(lambda u=url: httpc.request("GET", u + "/health", timeout=2)[0] == 200,
                                 30, f"{p.name} /health", proc=p)
        except BaseException:
            self.stop()
            raise

    def router_args(self) -> list[str]:
        """How a router is given these workers, in the flags sgl-router 0.3.2, SMG 1.13 and kvrouter
        share: `--worker-urls U...`, or `--pd-disaggregation --prefill U PORT ... --decode U ...`."""
        if not self.spec.prefill:
            return ["--worker-urls", *self.urls]
        args = ["--pd-disaggregation"]
        for i, url in enumerate(self.urls):
            if self.spec.role(i) == "prefill":
                args += ["--prefill", url, str(self.bootstrap_ports[i])]
            else:
                args += ["--decode", url]
        return args

    def indexes(self, role: str) -> list[int]:
        """The mocks of `role` (all of them in an aggregated fleet)."""
        return [i for i in range(len(self.urls)) if self.spec.role(i) in (role, None)]

    def check_alive(self) -> None:
        dead = [p.name for p in self.procs if not p.alive()]
        if dead:
            raise RuntimeError(f"mock worker(s) died: {', '.join(dead)}")

    def flush(self, timeout: float = 60) -> None:
        """POST /flush_cache on every worker; SGLang answers 400 while busy, so retry until 200."""
        for p, url in zip(self.procs, self.urls):
            httpc.wait_until(lambda u=url: httpc.request("POST", u + "/flush_cache", timeout=5)[0] == 200,
                             timeout, f"{p.name} /flush_cache to succeed (worker idle)", interval=0.2, proc=p)

    def scrape(self) -> list[dict[str, float]]:
        """Each worker's /metrics, summed per metric name over labels."""
        return [scrape_metrics(u) for u in self.urls]

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()


def scrape_series(url: str, prefix: str) -> dict[str, float]:
    """Every series (name with labels) of `url`/metrics whose name starts with `prefix`."""
    status, body = httpc.request("GET", url + "/metrics", timeout=5)
    out: dict[str, float] = {}
    for line in body.decode("utf-8", "replace").splitlines() if status == 200 else []:
        if line.startswith(prefix):
            try:
                series, value = line.rsplit(None, 1)
                out[series] = float(value)
            except ValueError:
                continue
    return out


def scrape_metrics(url: str) -> dict[str, float]:
    """`url`'s /metrics, each metric summed over its labels (empty if the scrape fails)."""
    status, body = httpc.request("GET", url + "/metrics", timeout=5)
    if status != 200:
        return {}
    return prom.by_name(prom.parse(body.decode("utf-8", "replace")))


def per_worker_delta(before: list[dict[str, float]], after: list[dict[str, float]],
                     names: tuple[str, ...]) -> list[float] | None:
    """The first metric in `names` that every worker exports, as after-before per worker."""
    for name in names:
        if all(name in a for a in after):
            return [a[name] - b.get(name, 0.0) for b, a in zip(before, after)]
    return None


def settle(seconds: float) -> None:
    time.sleep(seconds)
