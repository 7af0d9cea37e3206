"""Drives a kvrouter refit with SMG's own RL client (`smg.rl` from the `smg` wheel).

Usage: python refit_smg.py ROUTER_URL API_KEY FAILING_MOCK_URL
Exits non-zero (with a message) on the first broken expectation; prints "ok" at the end.
"""

import json
import sys
import threading
import urllib.request

from smg.rl import RL, FanoutError, paused

router, api_key, failing_mock = sys.argv[1], sys.argv[2], sys.argv[3]
rl = RL(router, api_key=api_key, timeout=60)


def http(method, url, body=None, key=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"})
    if key:
        req.add_header("authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def state():
    return http("GET", f"{router}/refit/state", key=api_key)[1]


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")


workers = rl.workers()
check(len(workers) == 2, f"two workers listed: {workers}")
check(all(w.engine == "sglang" and w.health == "healthy" for w in workers), "worker fields")
check(all(w.weight_version == "v1" for w in workers), "initial versions")
check(all(w.tp_size == 1 and w.dp_ranks == 1 for w in workers), "parallelism fields")
one = rl.worker(workers[0].id)
check(one.url == workers[0].url, "GET /v1/rl/workers/{id}")

# A full refit inside SMG's own pause/continue context manager.
held = {}
with paused(rl, "engine=sglang", mode="retract") as res:
    check(res.total == 2 and res.succeeded == 2, f"pause fanned out: {res}")
    st = state()
    check(st["gate"]["closed"], f"a pause through /v1/rl closes kvrouter's gate: {st}")

    def send():
        held["status"], held["body"] = http(
            "POST", f"{router}/generate",
            {"input_ids": [5, 6, 7, 8], "sampling_params": {"max_new_tokens": 2}})

    t = threading.Thread(target=send)
    t.start()
    t.join(0.5)
    check(t.is_alive(), "a generate during the pause is held")
    rl.fanout("flush_cache", {}, selector="engine=sglang")
    up = rl.fanout("update_weights_from_disk",
                   {"model_path": "/models/next", "weight_version": "v2"},
                   selector="engine in (sglang)")
    check(up.succeeded == 2 and all(r.status == 200 for r in up.results.values()), f"update: {up}")
    versions = {w.weight_version for w in rl.workers()}
    check(versions == {"v2"}, f"weight_version follows the update at once: {versions}")
t.join(30)
check(not t.is_alive() and held.get("status") == 200, f"held request served after continue: {held}")
check(held["body"]["meta_info"]["weight_version"] == "v2", f"served by new weights: {held}")
check(not state()["gate"]["closed"], "continue reopened the gate")

# One-worker engine call.
call = rl.call(workers[0].id, "update_weight_version", {"new_version": "v3"})
check(call.status == 200 and call.body["success"], f"one-worker call: {call}")
check(rl.worker(workers[0].id).weight_version == "v3", "one worker's version follows")
check(rl.worker(workers[1].id).weight_version == "v2", "the other is untouched")
info = rl.call(workers[1].id, "model_info", method="GET")
check(info.status == 200 and info.body["weight_version"] == "v2", f"GET passthrough: {info}")

# A selector matching one worker by url label.
only = rl.fanout("update_weight_version", {"new_version": "v3"},
                 selector=f"url={workers[1].url}")
check(only.total == 1, f"selector by label: {only}")
check({w.weight_version for w in rl.workers()} == {"v3"}, "fleet level again")

# A failing worker: 207 with failed[] naming it; FanoutError from the client.
http("POST", f"{failing_mock}/mock/fail_next", {"path": "/update_weights_from_disk"})
try:
    rl.fanout("update_weights_from_disk", {"model_path": "/m", "weight_version": "v4"},
              selector="engine=sglang")
    sys.exit("FAILED: a failing worker must raise FanoutError")
except FanoutError as e:
    check(e.status == 207, f"207 on partial failure: {e.status}")
    check(len(e.result.failed) == 1 and e.result.failed[0].url == failing_mock,
          f"failed names the worker: {e.result.failed}")
    check(e.result.total == 2 and e.result.succeeded == 1, "counts")

# Bad selector: a clean 400.
try:
    rl.fanout("flush_cache", {}, selector="pool in (a")
    sys.exit("FAILED: a bad selector must be refused")
except Exception as e:  # RlError
    check(getattr(e, "status", 0) == 400, f"bad selector is a 400: {e}")

print("ok")
