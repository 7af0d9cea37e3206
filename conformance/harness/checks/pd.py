"""PD disaggregation (docs/pd.md): the router with ``--pd-disaggregation`` over one prefill
and one decode worker. Every request form the router splits into two legs goes through it:
``/generate`` plain, batched (list-of-lists ``input_ids`` and a list ``text``), streamed,
with ``return_logprob`` (plain and streamed), ``/v1/completions`` with an array prompt,
``/v1/chat/completions`` with ``n=2``.

SGLang worker: after each request both workers received one body, each passed SGLang's
validation (``GenerateReqInput`` + ``normalize_batch_and_arguments``, or the OpenAI request
type and the ``GenerateReqInput`` serving_completions / serving_chat build from it), the
two bodies are the client's plus ``bootstrap_host`` / ``bootstrap_port`` / ``bootstrap_room``
and nothing else, the three are equal on both legs and have the shape docs/pd.md gives
(scalars; a list with one distinct room per prompt for a batch), and SGLang's normalised
object carries them (one non-null room per request SGLang will run). The fake workers are
started with ``disaggregation_mode`` prefill / decode in their ``ServerArgs`` (reported in
server info; they do no KV transfer).

Mock: real PD roles (the prefill answers only after its simulated KV transfer to the decode
that registered the same room; the bootstrap port from ``--disaggregation-bootstrap-port 0``
read from server info), so a 200 with the decode's output means both legs carried matching
rooms; the response shapes and the logprob merge are checked.
"""

from __future__ import annotations

import json
import urllib.request

from .. import fleet
from ..fleet import prompt
from ..procs import free_port_range, get, wait_for
from ..result import Step, skipped

FIELDS = ("bootstrap_host", "bootstrap_port", "bootstrap_room")
BOOTSTRAP_PORT = 8998  # what the fake prefill worker advertises (nothing dials it)


def cases():
    """(name, path, body, prompts in the batch or None for a single request, expanded count,
    stream)."""
    p1, p2, p3 = prompt(801, 40), prompt(802, 24), prompt(803, 33)
    sp = {"max_new_tokens": 3}
    return [
        ("/generate input_ids", "/generate", {"input_ids": p1, "sampling_params": sp}, None, 1, False),
        ("/generate batched input_ids (3 lists)", "/generate",
         {"input_ids": [p1, p2, p3], "sampling_params": sp}, 3, 3, False),
        ("/generate batched text (2 strings)", "/generate",
         {"text": ["t1 t2 t3 t4 t5 t6 t7 t8", "t9 t10 t11 t12"], "sampling_params": sp}, 2, 2, False),
        ("/generate streamed", "/generate",
         {"input_ids": p2, "sampling_params": sp, "stream": True}, None, 1, True),
        ("/generate return_logprob", "/generate",
         {"input_ids": p3, "sampling_params": sp, "return_logprob": True}, None, 1, False),
        ("/generate streamed with return_logprob", "/generate",
         {"input_ids": p1, "sampling_params": sp, "return_logprob": True, "stream": True},
         None, 1, True),
        ("/v1/completions array prompt (2)", "/v1/completions",
         {"model": "dummy", "prompt": ["t21 t22 t23 t24 t25", "t26 t27 t28"], "max_tokens": 2},
         2, 2, False),
        ("/v1/chat/completions n=2", "/v1/chat/completions",
         {"model": "dummy", "messages": [{"role": "user", "content": "t31 t32 t33 t34"}],
          "n": 2, "max_tokens": 2}, 2, 2, False),
    ]


def send(url, body, stream, timeout=30.0):
    """(status, parsed JSON or the list of SSE events, raw text)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status = r.read().decode(errors="replace"), r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read().decode(errors="replace"), e.code
    if stream:
        evs = [ln[len("data: "):] for ln in raw.splitlines() if ln.startswith("data: ")]
        return status, evs, raw
    try:
        return status, json.loads(raw), raw
    except ValueError:
        return status, None, raw


def shape_ok(sent, batch, host, port):
    """docs/pd.md: scalars for a single request; for a batch, lists with one entry per prompt
    and distinct rooms. Rooms below 2^63."""
    h, p, r = (sent.get(k, "<absent>") for k in FIELDS)
    if batch is None:
        ok = h == host and p == port and isinstance(r, int) and 0 <= r < 2 ** 63
        return ok, f"host {h!r} port {p!r} room {r!r}"
    ok = (isinstance(h, list) and isinstance(p, list) and isinstance(r, list)
          and len(h) == len(p) == len(r) == batch and all(x == host for x in h)
          and all(x == port for x in p) and all(isinstance(x, int) and 0 <= x < 2 ** 63 for x in r)
          and len(set(r)) == batch)
    return ok, f"host {h!r} port {p!r} room {r!r} (want {batch} each)"


def parsed_ok(parsed, sent, batch, expanded):
    """SGLang's normalised GenerateReqInput carries the router's values: the scalars for a
    single request; for a batch, the first ``expanded`` entries (obj[i] for every request
    SGLang runs) equal the router's lists and have distinct, non-null rooms."""
    ph, pp, pr = (parsed.get(k) for k in FIELDS)
    sh, spt, sr = (sent.get(k) for k in FIELDS)
    if batch is None:
        return (parsed.get("is_single") and (ph, pp, pr) == (sh, spt, sr),
                f"parsed {ph!r} {pp!r} {pr!r}")
    n = expanded
    ok = (not parsed.get("is_single") and isinstance(pr, list) and len(pr) >= n
          and ph[:n] == sh[:n] and pp[:n] == spt[:n] and pr[:n] == sr[:n]
          and None not in pr[:n] and len(set(pr[:n])) == n)
    return ok, f"parsed host {ph!r} port {pp!r} room {pr!r}"


def response_ok(path, out, batch, stream, body):
    if stream:
        ok = bool(out) and out[-1] == "[DONE]" and len(out) >= 2
        return ok, f"{len(out or [])} events"
    if path == "/generate":
        if batch is None:
            return isinstance(out, dict) and bool(out.get("output_ids")), str(out)[:200]
        return isinstance(out, list) and len(out) == batch, str(out)[:200]
    ch = (out or {}).get("choices") if isinstance(out, dict) else None
    return isinstance(ch, list) and len(ch) == batch, str(out)[:200]


def logprobs_ok(kind, out, stream, body):
    """The prefill's input_token_logprobs prepended to the decode's (docs/pd.md)."""
    n = len(body["input_ids"])
    if stream:
        evs = [json.loads(e) for e in out if e != "[DONE]"]
        lists = [e.get("meta_info", {}).get("input_token_logprobs") or [] for e in evs]
    else:
        lists = [(out or {}).get("meta_info", {}).get("input_token_logprobs") or []]
    if not lists:
        return False, "no events"
    if kind == "sglang":
        # fake prefill -0.25 per token, fake decode -0.5 per token
        want = [-0.25] * n + [-0.5] * n
        ok = all([x[0] for x in lp] == want for lp in lists)
    else:
        # the mock's prefill computes the prompt's logprobs (the first null), its decode
        # returns none for the prompt: the merge is the prompt's tokens once, in order
        ok = all([x[1] for x in lp] == body["input_ids"] for lp in lists)
    return ok, f"{[len(lp) for lp in lists]} entries (prompt {n})"


def sglang_dp_rules(S):
    """What this SGLang version does with a DP PD request: the prefill's load-balance method
    by default (``ServerArgs`` resolution; ``auto`` is ``follow_bootstrap_room`` for a PD
    prefill, ``arg_groups/serving_hook.py`` ``handle_load_balance_method``), which rank
    fields its ``GenerateReqInput`` keeps, and whether its KV sender fails a prefill placed
    off ``room % dp_size`` (``disaggregation/common/conn.py``: "follow_bootstrap_room
    conflict", unless the prefill's request carries ``disagg_prefill_dp_rank``)."""
    import importlib
    import inspect

    a = S.ServerArgs(model_path="dummy", load_format="dummy", page_size=16, dp_size=2,
                     host="127.0.0.1", port=1, disaggregation_mode="prefill")
    if hasattr(a, "resolve_once"):
        a.resolve_once()
    lb = a.resolved_dict().get("load_balance_method") if hasattr(a, "resolved_dict") else None
    lb = lb or a.load_balance_method
    if lb == "auto":
        lb = "follow_bootstrap_room"
    fields = getattr(S.GenerateReqInput, "__dataclass_fields__", {})
    try:
        src = inspect.getsource(importlib.import_module("sglang.srt.disaggregation.common.conn"))
    except Exception:
        src = ""
    return {"lb": lb, "routed": "routed_dp_rank" in fields,
            "disagg": "disagg_prefill_dp_rank" in fields,
            "conflict_check": "follow_bootstrap_room conflict" in src}


def placement(rules, room, routed, dpr, dis_prefill, dis_decode, dp):
    """(prefill rank, decode's prefill rank, conflict) under SGLang's rules for one request.
    Prefill: an explicit rank (``routed_dp_rank``, or ``data_parallel_rank``) is direct
    routing, else ``follow_bootstrap_room`` places it on ``room % dp``. Decode: newer SGLang
    reads ``disagg_prefill_dp_rank`` (``_resolve_prefill_dp_rank``), 0.5.9 passes its
    ``data_parallel_rank`` as ``prefill_dp_rank`` (``decode.py``), else ``room % dp``."""
    follow = rules["lb"] == "follow_bootstrap_room"
    placed = routed if routed is not None else dpr
    if placed is None and follow:
        placed = room % dp
    conflict = (rules["conflict_check"] and follow and dis_prefill is None
                and placed is not None and placed != room % dp)
    look = dis_decode if dis_decode is not None else (dpr if dpr is not None else room % dp)
    return placed, look, conflict


def dp_part(s, ctx, rules):
    """A DP-2 prefill and a DP-2 decode (SGLang workers): the rank the router chose is where
    SGLang's prefill runs the request and where its decode fetches the KV from."""
    env = ctx.env
    pw = fleet.Worker(env, "sglang", dp_size=2, sglang_extra={
        "disaggregation_mode": "prefill", "disaggregation_bootstrap_port": BOOTSTRAP_PORT})
    dw = fleet.Worker(env, "sglang", form="none", dp_size=2,
                      sglang_extra={"disaggregation_mode": "decode"})
    router = None
    try:
        router = env.router([], extra=["--pd-disaggregation", "--prefill", pw.url,
                                       str(BOOTSTRAP_PORT), "--decode", dw.url])
        ok, _ = wait_for(lambda: get(f"{router.url}/readiness")[0] == 200, timeout=15.0)
        s.check(ok, "DP: router ready (dp_size 2 prefill and decode)")
        s.note(f"DP rules of SGLang {ctx.S.version}: prefill load balance {rules['lb']}, "
               f"GenerateReqInput keeps routed_dp_rank: {rules['routed']}, "
               f"disagg_prefill_dp_rank: {rules['disagg']}; KV sender conflict check: "
               f"{rules['conflict_check']}")
        bodies = [{"input_ids": prompt(900 + i, 40), "sampling_params": {"max_new_tokens": 2}}
                  for i in range(6)]
        bodies.append({"input_ids": [prompt(920, 24), prompt(921, 24), prompt(922, 24)],
                       "sampling_params": {"max_new_tokens": 2}})
        bad, ranks_seen, n = [], set(), 0
        for body in bodies:
            st, out, raw = send(router.url + "/generate", body, False)
            if st != 200:
                bad.append(f"status {st} {raw[:120]}")
                continue
            bp = get(f"{pw.url}/_conformance/bodies")[2]["bodies"][-1]
            bd = get(f"{dw.url}/_conformance/bodies")[2]["bodies"][-1]
            rank = bp["body"].get("routed_dp_rank")
            if rank is None or bd["body"].get("disagg_prefill_dp_rank") != rank:
                bad.append(f"prefill routed_dp_rank {rank!r}, decode disagg_prefill_dp_rank "
                           f"{bd['body'].get('disagg_prefill_dp_rank')!r}")
                continue
            ranks_seen.add(rank)
            for (_, _, room), (r_p, d_p, x_p), (_, d_d, x_d) in zip(
                    bp["parsed"]["requests"], bp["parsed"]["ranks"], bd["parsed"]["ranks"]):
                n += 1
                placed, look, conflict = placement(rules, room, r_p, d_p, x_p, x_d, 2)
                if conflict or placed != rank or look != rank:
                    bad.append(f"router rank {rank}, room {room} (% 2 = {room % 2}): "
                               f"SGLang's prefill on {placed}"
                               + (" and its KV sender fails 'follow_bootstrap_room conflict'"
                                  if conflict else "") + f", decode fetches from {look}")
        s.check(not bad, f"DP: {n} requests (6 single, one batch of 3): SGLang's prefill runs "
                "each on the router's rank and its decode fetches the KV from that rank",
                "; ".join(bad[:4]) + (f" (+{len(bad) - 4} more)" if len(bad) > 4 else ""))
        invalid = pw.state()["invalid"] + dw.state()["invalid"]
        s.check(not invalid, "DP: every body passed SGLang's validation",
                json.dumps(invalid)[:300])
        s.note(f"DP: router ranks used {sorted(ranks_seen)}")
    finally:
        if router is not None:
            router.stop(kill=True)
        pw.stop()
        dw.stop()


def run(ctx):
    s = Step("pd", ctx.kind)
    env, S = ctx.env, ctx.S
    fields = getattr(S.GenerateReqInput, "__dataclass_fields__", {})
    if not all(f in fields for f in FIELDS):
        return skipped("pd", ctx.kind, f"SGLang {S.version}'s GenerateReqInput has no "
                       "bootstrap_host / bootstrap_port / bootstrap_room")
    if ctx.kind == "mock":
        if not env.mock_supports("--disaggregation-mode"):
            return skipped("pd", "mock", "this sglang-mock build has no --disaggregation-mode")
        # 0.5.23 mode: port 0 and read it back from server info; the 0.5.9 mode's server
        # info has no disaggregation keys, so it gets a free port
        given = None if not env.mock_flags else free_port_range(1)
        pw = fleet.Worker(env, "mock", mock_extra=["--disaggregation-mode", "prefill",
                                                    "--disaggregation-bootstrap-port",
                                                    str(given or 0)])
        dw = fleet.Worker(env, "mock", form="none", mock_extra=["--disaggregation-mode", "decode"])
    else:
        pw = fleet.Worker(env, "sglang", sglang_extra={
            "disaggregation_mode": "prefill", "disaggregation_bootstrap_port": BOOTSTRAP_PORT})
        dw = fleet.Worker(env, "sglang", form="none",
                          sglang_extra={"disaggregation_mode": "decode"})
    router = None
    try:
        info_p = get(f"{pw.url}/server_info")[2] or {}
        info_d = get(f"{dw.url}/server_info")[2] or {}
        bport = info_p.get("disaggregation_bootstrap_port")
        what = ("server info reports disaggregation_mode prefill / decode and the prefill's "
                "disaggregation_bootstrap_port")
        roles_ok = (info_p.get("disaggregation_mode") == "prefill"
                    and info_d.get("disaggregation_mode") == "decode" and isinstance(bport, int))
        if ctx.kind == "mock" and given and not roles_ok:
            s.note(f"sglang-mock {' '.join(env.mock_flags)}: server info has no "
                   "disaggregation_mode / disaggregation_bootstrap_port (SGLang 0.5.9's "
                   "server_info spreads ServerArgs and has both); bootstrap port given as "
                   f"--disaggregation-bootstrap-port {given}")
        else:
            s.check(roles_ok, what, f"prefill {info_p.get('disaggregation_mode')!r} port "
                    f"{bport!r}, decode {info_d.get('disaggregation_mode')!r}")
        if not isinstance(bport, int):
            bport = given or BOOTSTRAP_PORT
        router = env.router([], extra=["--pd-disaggregation", "--prefill", pw.url, str(bport),
                                       "--decode", dw.url])
        ok, _ = wait_for(lambda: get(f"{router.url}/readiness")[0] == 200, timeout=15.0)
        s.check(ok, "router ready (one prefill, one decode)")
        host = "127.0.0.1"
        seen = {"p": 0, "d": 0}
        for name, path, body, batch, expanded, stream in cases():
            st, out, raw = send(router.url + path, body, stream)
            s.check(st == 200, f"{name}: 200 through the router", f"{st} {raw[:300]}")
            rok, rdet = response_ok(path, out, batch, stream, body)
            s.check(st == 200 and rok, f"{name}: response shape (decode's answer)", rdet)
            if body.get("return_logprob") and st == 200:
                lok, ldet = logprobs_ok(ctx.kind, out, stream, body)
                s.check(lok, f"{name}: input_token_logprobs = prefill's ++ decode's", ldet)
            if ctx.kind != "sglang":
                continue
            legs = {}
            for leg, w in (("p", pw), ("d", dw)):
                got = get(f"{w.url}/_conformance/bodies")[2]["bodies"]
                legs[leg] = got[seen[leg]:]
                seen[leg] = len(got)
            invalid = pw.state()["invalid"] + dw.state()["invalid"]
            s.check(not invalid, f"{name}: every body passed SGLang's validation",
                    json.dumps(invalid)[:400])
            one = len(legs["p"]) == 1 and len(legs["d"]) == 1
            s.check(one and legs["p"][0]["path"] == path and legs["d"][0]["path"] == path,
                    f"{name}: prefill and decode each received one body on {path}",
                    f"prefill {[b['path'] for b in legs['p']]} decode "
                    f"{[b['path'] for b in legs['d']]}")
            if not one:
                continue
            bp, bd = legs["p"][0]["body"], legs["d"][0]["body"]
            rest_p = {k: v for k, v in bp.items() if k not in FIELDS}
            rest_d = {k: v for k, v in bd.items() if k not in FIELDS}
            s.check(rest_p == body and rest_d == body,
                    f"{name}: both legs got the client's body plus the bootstrap fields only",
                    f"prefill extra {sorted(set(bp) - set(body))} decode extra "
                    f"{sorted(set(bd) - set(body))}")
            sp_ = {k: bp.get(k, "<absent>") for k in FIELDS}
            sd_ = {k: bd.get(k, "<absent>") for k in FIELDS}
            s.check(sp_ == sd_, f"{name}: bootstrap fields equal on both legs",
                    f"prefill {sp_} decode {sd_}")
            shp, sdet = shape_ok(sp_, batch, host, bport)
            s.check(shp, f"{name}: bootstrap fields "
                    + ("scalars" if batch is None else f"lists of {batch}, distinct rooms"), sdet)
            pok_p, pdet_p = parsed_ok(legs["p"][0]["parsed"], sp_, batch, expanded)
            pok_d, pdet_d = parsed_ok(legs["d"][0]["parsed"], sd_, batch, expanded)
            s.check(pok_p and pok_d, f"{name}: SGLang's normalised GenerateReqInput carries them "
                    f"({expanded} request{'s' if expanded > 1 else ''}, one room each)",
                    f"prefill {pdet_p}; decode {pdet_d}")
            reqs = legs["p"][0]["parsed"].get("requests") or []
            s.check(reqs == legs["d"][0]["parsed"].get("requests")
                    and all(h == host and p_ == bport and isinstance(r, int) for h, p_, r in reqs),
                    f"{name}: every request SGLang's TokenizerManager sends for it carries "
                    "host, port and a room, the same on both legs", json.dumps(reqs)[:300])
            rooms = [r for _, _, r in reqs]
            if len(set(rooms)) < len(rooms):
                s.note(f"{name}: SGLang {S.version}'s TokenizerManager sends {len(rooms)} "
                       f"requests (n={legs['p'][0]['parsed']['parallel_sample_num']}: a prefix "
                       f"warm-up and the samples, copies of obj[i]) with rooms {rooms}; the "
                       "router's other rooms are unused")
    finally:
        if router is not None:
            router.stop(kill=True)
        pw.stop()
        dw.stop()
    if ctx.kind == "sglang":
        dp_part(s, ctx, sglang_dp_rules(S))
    return s.result()
