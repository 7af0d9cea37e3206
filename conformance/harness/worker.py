"""The fake SGLang worker process: SGLang's objects behind an HTTP server, no GPU, no model.

Run: ``python -m harness.worker '<json config>'``; prints ``listening on http://HOST:PORT``
when it accepts connections. Config keys: host, port, page_size, dp_size, capacity,
kv_events_config (a JSON string as ``--kv-events-config`` takes it, or null),
load_publish_endpoint, native (path of the compiled hash_binding module, or null),
disaggregation_mode / disaggregation_bootstrap_port (a PD role, reported in server info only).

SGLang routes (bodies as ``entrypoints/http_server.py`` builds them):
  /health, /health_generate        200, empty
  /server_info, /get_server_info   build_server_info(ServerArgs, scheduler info) + the keys
                                   server_info() adds (startup_time, internal_states,
                                   version, frontend)
  /model_info, /get_model_info     model_info()'s keys for the dummy model
  /generate                        generate_contract_error + GenerateReqInput (pydantic, as
                                   FastAPI parses it) + normalize_batch_and_arguments; single,
                                   batched, streamed (SSE), return_logprob
  /v1/completions, /v1/chat/completions   CompletionRequest / ChatCompletionRequest
  /v1/loads                        LoadSnapshot.to_dict per rank
  /flush_cache                     tree reset on every rank
Every body that fails SGLang's validation is answered 400 and recorded: the harness fails
the run on any. Harness-only routes under /_conformance/ (state, evict, load, writeback,
bodies: every generate-route body received with SGLang's normalised GenerateReqInput's
bootstrap fields).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
import traceback
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from . import sglang_env
from .engine import RankEngine

LORA_IDS = {}  # adapter name -> the 32-hex lora_id SGLang's LoRARef would carry


def lora_id_of(name):
    import hashlib

    return LORA_IDS.setdefault(name, hashlib.md5(name.encode()).hexdigest())


def tokenize(text):
    """Tokenizer stand-in (the mock's rule): word ``t<N>`` is N, other words hash."""
    import zlib

    out = []
    for w in str(text).split():
        if w.startswith("t") and w[1:].isdigit():
            out.append(int(w[1:]))
        else:
            out.append(256 + zlib.crc32(w.encode()) % 30000)
    return out


class Worker:
    def __init__(self, cfg):
        self.cfg = cfg
        t0 = time.perf_counter()
        native = None
        if cfg.get("native"):
            spec = importlib.util.spec_from_file_location("hicache_hash_cpp", cfg["native"])
            native = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(native)
        self.S = S = sglang_env.load(native)
        self.invalid = []
        self.requests = {"generate": 0, "completions": 0, "chat": 0}
        kw = dict(model_path="dummy", load_format="dummy", page_size=cfg["page_size"],
                  dp_size=cfg.get("dp_size", 1), host=cfg["host"], port=cfg["port"])
        if cfg.get("kv_events_config"):
            kw["kv_events_config"] = cfg["kv_events_config"]
        if cfg.get("load_publish_endpoint"):
            kw["load_publish_endpoint"] = cfg["load_publish_endpoint"]
        if cfg.get("disaggregation_mode"):
            # PD role: only reported (server info, model info); the fake worker does no
            # KV transfer and needs no peer.
            kw["disaggregation_mode"] = cfg["disaggregation_mode"]
            if cfg.get("disaggregation_bootstrap_port"):
                kw["disaggregation_bootstrap_port"] = cfg["disaggregation_bootstrap_port"]
        self.bodies = []  # every body received on the generate routes (/_conformance/bodies)
        self._local = threading.local()
        self.args = S.ServerArgs(**kw)
        if hasattr(self.args, "resolve_once"):
            self.args.resolve_once()  # what the launcher does before publishing
        self.dp = self.args.dp_size
        self.engines = [
            RankEngine(S, rank=r, dp_size=self.dp, page_size=cfg["page_size"],
                       capacity=cfg.get("capacity", 65536),
                       kv_events_config=cfg.get("kv_events_config"),
                       load_publish_endpoint=cfg.get("load_publish_endpoint"))
            for r in range(self.dp)
        ]
        # Scheduler.startup_time: this launch's measured phase durations (the router's
        # launch marker reads them; a restarted process measures other values).
        self.kv_alloc_s = time.perf_counter() - t0
        self.e2e_s = time.perf_counter() - t0
        self.rr = 0
        self.stop = threading.Event()
        threading.Thread(target=self._idle_loop, daemon=True).start()

    def _idle_loop(self):
        while not self.stop.is_set():
            for e in self.engines:
                e.publish_load()
            time.sleep(0.05)

    # -- bodies ---------------------------------------------------------------------------

    def startup_time(self):
        S = self.S
        if S.build_scheduler_startup_time is None:
            return None
        return S.build_scheduler_startup_time(
            target_load_weight=0.0, draft_load_weight=0.0, kv_cache_allocation=self.kv_alloc_s,
            scheduler_e2e=self.e2e_s, target_cuda_graph=None, draft_cuda_graph=None)

    def server_info(self):
        import msgspec

        S, args = self.S, self.args
        cap = self.cfg.get("capacity", 65536)
        scheduler_info = {"status": "ready", "max_total_num_tokens": cap,
                          "max_req_input_len": 2047, "startup_time": self.startup_time()}
        if S.disabled_l3_layout is not None:
            scheduler_info["hicache_object_layout"] = S.disabled_l3_layout(
                "Hierarchical cache is disabled", page_size=self.cfg["page_size"])
        if S.build_server_info is not None:
            info = S.build_server_info(args, scheduler_info)
        else:  # older SGLang: server_info() spread the args dict itself
            import dataclasses

            info = {**dataclasses.asdict(args), **scheduler_info}
        state = dict(args.resolved_dict()) if hasattr(args, "resolved_dict") else dict(info)
        state.pop("custom_sigquit_handler", None)
        state.update(effective_max_running_requests_per_dp=256, last_gen_throughput=0.0)
        full = {**info, "startup_time": self.startup_time(),
                "internal_states": [dict(state) for _ in range(self.dp)],
                "version": S.version, "frontend": "python"}
        return msgspec.json.decode(msgspec.json.encode(full, enc_hook=str))

    def model_info(self):
        return {"model_path": "dummy", "served_model_name": "dummy", "tokenizer_path": "dummy",
                "is_generation": True, "preferred_sampling_params": None,
                "weight_version": "default", "load_format": "dummy", "reasoning_parser": None,
                "tool_call_parser": None,
                "disaggregation_mode": getattr(self.args, "disaggregation_mode", "null"),
                "has_image_understanding": False, "has_audio_understanding": False,
                "model_type": None, "architectures": None}

    def v1_loads(self, include):
        if self.S.load_snapshot_mod is None:
            return self._v1_loads_old()
        inc = set(s.strip() for s in include.split(",")) if include else None
        return {"timestamp": datetime.now(timezone.utc).isoformat(), "version": self.S.version,
                "accelerator": None, "num_accelerators": 0,
                "loads": [e.load_snapshot().to_dict(inc) for e in self.engines]}

    def _v1_loads_old(self):
        """Older SGLang (0.5.9): ``GetLoadsReqOutput`` per rank through ``v1_loads``'s own
        dict factory and aggregate (``entrypoints/v1_loads.py``)."""
        import dataclasses

        try:
            from sglang.srt.entrypoints import v1_loads as vl
            from sglang.srt.managers.io_struct import GetLoadsReqOutput
        except ImportError:
            return None
        loads = []
        for e in self.engines:
            o = GetLoadsReqOutput(
                dp_rank=e.rank, timestamp=time.time(), num_running_reqs=e.load["running"],
                num_waiting_reqs=e.load["waiting"], num_used_tokens=e.alloc.used,
                max_total_num_tokens=e.alloc.capacity, token_usage=0.0, gen_throughput=0.0,
                cache_hit_rate=0.0, utilization=0.0, max_running_requests=e.max_running)
            d = dataclasses.asdict(o, dict_factory=vl._loads_dict_factory)
            d["num_total_reqs"] = d["num_running_reqs"] + d["num_waiting_reqs"]
            loads.append(d)
        return {"timestamp": datetime.now(timezone.utc).isoformat(), "version": self.S.version,
                "dp_rank_count": len(loads), "loads": loads,
                "aggregate": vl._compute_aggregate(loads)}

    def get_load(self):
        """``/get_load`` (gone in 0.5.23): ``GetLoadReqOutput`` per rank."""
        import dataclasses

        try:
            from sglang.srt.managers.io_struct import GetLoadReqOutput
        except ImportError:
            return None
        if self.S.load_snapshot_mod is not None:
            return None  # 0.5.23 serves 404 here
        return [dataclasses.asdict(GetLoadReqOutput(
            dp_rank=e.rank, num_reqs=e.load["running"] + e.load["waiting"],
            num_waiting_reqs=e.load["waiting"], num_tokens=e.alloc.used, ts_tic=time.time()))
            for e in self.engines]

    def _rank(self, body):
        r = body.get("routed_dp_rank", body.get("data_parallel_rank"))
        if r is None:
            r = self.rr % self.dp
            self.rr += 1
        return int(r)

    def _namespace(self, body):
        salt = body.get("cache_salt") or None
        extra = body.get("extra_key") or None
        lora = body.get("lora_path") or None
        if isinstance(lora, list):
            lora = lora[0] if lora else None
        return salt, extra, lora

    def _run(self, rank, tokens, max_new, body):
        salt, extra, lora = self._namespace(body)
        e = self.engines[rank]
        if salt and not self.S.radix_key_has_salt:
            # older SGLang: cache_salt is carried as the request's extra_key
            extra, salt = (extra or "") + salt, None
        if lora:
            lid = lora_id_of(lora)
            # Req.__init__ appends the adapter's lora_id to extra_key; the scheduler
            # registers the adapter's name for KV events at admission.
            extra = (extra or "") + lid
            import types as _t

            e.tree.kv_events.lora_names.register(_t.SimpleNamespace(lora_id=lid, extra_key=extra), lora)
        out = [(7 + i) % 1000 + 256 for i in range(max(1, max_new))]
        cached = e.run_request(tokens, out, extra_key=extra, cache_salt=salt)
        return out, cached

    # SGLang's parsed request: the GenerateReqInput after normalize_batch_and_arguments, as
    # /generate builds it, and as serving_completions / serving_chat build it from the
    # OpenAI request (prompt kwargs, n in the sampling params, the PD fields passed through).
    def _normalized(self, **kw):
        obj = self.S.GenerateReqInput(**kw)
        obj.normalize_batch_and_arguments()
        return obj

    @staticmethod
    def _parsed(obj):
        """The normalised object's PD fields, and the (host, port, room) of each request
        TokenizerManager sends for it: the object itself when single; ``obj[i]`` for
        i < batch_size without parallel sampling; with n > 1 (``_handle_batch_request``)
        ``objs = [obj[i] for i in range(batch_size)]``, then per i a prefix warm-up
        (max_new_tokens 0) and n samples, all copies of ``objs[i]``."""
        n = getattr(obj, "parallel_sample_num", 1)
        bs = getattr(obj, "batch_size", 1)
        if obj.is_single:
            subs = [obj]
        elif n == 1:
            subs = [obj[i] for i in range(bs)]
        else:
            subs = [o for i in range(bs) for o in [obj[i]] * (1 + n)]
        sent = [[o.bootstrap_host, o.bootstrap_port, o.bootstrap_room] for o in subs]
        # DP fields as SGLang keeps them (None where this version has no such field: an
        # unknown key is dropped by the parser)
        ranks = [[getattr(o, f, None) for f in
                  ("routed_dp_rank", "data_parallel_rank", "disagg_prefill_dp_rank")]
                 for o in subs]
        return {"bootstrap_host": obj.bootstrap_host, "bootstrap_port": obj.bootstrap_port,
                "bootstrap_room": obj.bootstrap_room, "is_single": obj.is_single,
                "batch_size": bs, "parallel_sample_num": n, "requests": sent, "ranks": ranks}

    def _record(self, path, body, obj):
        # the body as received (the handler's copy: SGLang's validators may fill the dict)
        raw = getattr(self._local, "raw", body)
        self.bodies.append({"path": path, "body": raw, "parsed": self._parsed(obj)})

    def _logprob_value(self):
        # role-specific values, so a merge of the two legs' lists is visible
        return {"prefill": -0.25, "decode": -0.5}.get(self.cfg.get("disaggregation_mode"), -1.0)

    def _one(self, rank, tokens, max_new, body, index=0):
        out, cached = self._run(rank, tokens, max_new, body)
        meta = {"id": body.get("rid") or "r", "prompt_tokens": len(tokens),
                "completion_tokens": len(out), "cached_tokens": cached,
                "finish_reason": {"type": "length", "length": len(out)},
                "dp_rank": rank if self.dp > 1 else None}
        if body.get("return_logprob"):
            lp = self._logprob_value()
            meta["input_token_logprobs"] = [[lp, t, None] for t in tokens]
            meta["output_token_logprobs"] = [[lp, t, None] for t in out]
        return {"text": "", "output_ids": out, "meta_info": meta, "index": index}

    def generate(self, body):
        S = self.S
        if S.generate_contract_error is not None:
            err = S.generate_contract_error(body)
            if err is not None:
                raise ValueError(f"generate_contract_error: {err}")
        from pydantic import TypeAdapter

        obj = TypeAdapter(S.GenerateReqInput).validate_python(body)
        obj.normalize_batch_and_arguments()
        self._record("/generate", body, obj)
        if body.get("input_ids") is not None:
            prompts = body["input_ids"]
            if not (prompts and isinstance(prompts[0], list)):
                prompts = [prompts]
        else:
            t = body.get("text", "")
            prompts = [tokenize(x) for x in (t if isinstance(t, list) else [t])]
        batch = not obj.is_single
        sp = body.get("sampling_params") or {}
        if isinstance(sp, list):
            sp = sp[0] if sp else {}
        max_new = int(sp.get("max_new_tokens", 1) or 1)
        rank = self._rank(body)
        outs = [self._one(rank, toks, max_new, body, i) for i, toks in enumerate(prompts)]
        return outs if batch else outs[0]

    def completions(self, body):
        req = self.S.CompletionRequest.model_validate(body)
        p = req.prompt
        many = isinstance(p, list) and p and (isinstance(p[0], str) or isinstance(p[0], list))
        prompts = p if many else [p]
        kw = ({"text": p} if isinstance(p, str) or (isinstance(p, list) and p and isinstance(p[0], str))
              else {"input_ids": p})
        obj = self._normalized(**kw, sampling_params={"max_new_tokens": req.max_tokens or 1,
                                                       "n": req.n or 1},
                               stream=bool(req.stream), bootstrap_host=req.bootstrap_host,
                               bootstrap_port=req.bootstrap_port,
                               bootstrap_room=req.bootstrap_room)
        self._record("/v1/completions", body, obj)
        rank = self._rank(body)
        choices, usage = [], [0, 0, 0]
        for i, q in enumerate(prompts):
            tokens = q if isinstance(q, list) else tokenize(q)
            for _ in range(req.n or 1):
                out, cached = self._run(rank, tokens, req.max_tokens or 1, body)
                choices.append({"index": len(choices), "text": "", "finish_reason": "length"})
                usage = [usage[0] + len(tokens), usage[1] + len(out), usage[2] + cached]
        return {"id": "cmpl", "object": "text_completion", "created": int(time.time()),
                "model": "dummy", "choices": choices,
                "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                          "total_tokens": usage[0] + usage[1],
                          "prompt_tokens_details": {"cached_tokens": usage[2]}}}

    def chat(self, body):
        req = self.S.ChatCompletionRequest.model_validate(body)
        text = " ".join(str(m.content) if not isinstance(m, dict) else str(m.get("content"))
                        for m in req.messages)
        tokens = tokenize(text)
        max_new = req.max_completion_tokens or req.max_tokens or 1
        # serving_chat: the templated prompt (here the joined contents) as one text
        obj = self._normalized(text=text, sampling_params={"max_new_tokens": max_new,
                                                           "n": req.n or 1},
                               stream=bool(req.stream), bootstrap_host=req.bootstrap_host,
                               bootstrap_port=req.bootstrap_port,
                               bootstrap_room=req.bootstrap_room)
        self._record("/v1/chat/completions", body, obj)
        rank = self._rank(body)
        choices, cached = [], 0
        for i in range(req.n or 1):
            out, cached = self._run(rank, tokens, max_new, body)
            choices.append({"index": i, "message": {"role": "assistant", "content": ""},
                            "finish_reason": "length"})
        return {"id": "chat", "object": "chat.completion", "created": int(time.time()),
                "model": "dummy", "choices": choices,
                "usage": {"prompt_tokens": len(tokens), "completion_tokens": len(out) * len(choices),
                          "total_tokens": len(tokens) + len(out) * len(choices),
                          "prompt_tokens_details": {"cached_tokens": cached}}}

    def state(self):
        return {"ranks": [dict(e.content(), rank=e.rank, batches=e.batches) for e in self.engines],
                "invalid": self.invalid, "requests": self.requests,
                "native_hash": self.S.native_hash, "version": self.S.version}


def make_handler(w: Worker):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _send(self, code, obj=None, text=None):
            data = b"" if obj is None and text is None else (
                text.encode() if text is not None else json.dumps(obj).encode())
            self.send_response(code)
            self.send_header("content-type", "application/json" if text is None else "text/plain")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, out):
            """SSE as /generate streams it: one event per output token (cumulative
            output_ids), then ``data: [DONE]``; the connection closes at the end."""
            outs = out if isinstance(out, list) else [out]
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True
            for o in outs:
                ids = o["output_ids"]
                for k in range(1, len(ids) + 1):
                    ev = dict(o, output_ids=ids[:k],
                              meta_info=dict(o["meta_info"], completion_tokens=k,
                                             finish_reason=o["meta_info"]["finish_reason"]
                                             if k == len(ids) else None))
                    if "output_token_logprobs" in ev["meta_info"]:
                        ev["meta_info"]["output_token_logprobs"] = \
                            o["meta_info"]["output_token_logprobs"][:k]
                    self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
                    self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def _body(self):
            n = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(n) if n else b""
            return json.loads(raw) if raw else {}

        def do_GET(self):
            u = urlparse(self.path)
            q = parse_qs(u.query)
            p = u.path
            if p in ("/health", "/health_generate"):
                return self._send(200, text="")
            if p in ("/server_info", "/get_server_info"):
                return self._send(200, w.server_info())
            if p in ("/model_info", "/get_model_info"):
                return self._send(200, w.model_info())
            if p == "/v1/loads":
                body = w.v1_loads((q.get("include") or [None])[0])
                return self._send(404 if body is None else 200, body or {"detail": "Not Found"})
            if p == "/get_load":
                body = w.get_load()
                return self._send(404 if body is None else 200, body if body is not None else {"detail": "Not Found"})
            if p == "/_conformance/state":
                return self._send(200, w.state())
            if p == "/_conformance/bodies":
                return self._send(200, {"bodies": w.bodies})
            if p == "/flush_cache":
                return self.do_POST()
            if p == "/metrics":
                return self._send(200, text="")
            return self._send(404, {"detail": "Not Found"})

        def do_POST(self):
            p = urlparse(self.path).path
            try:
                body = self._body()
            except ValueError as e:
                w.invalid.append({"path": p, "error": f"json: {e}"})
                return self._send(400, {"error": {"message": str(e)}})
            routes = {"/generate": ("generate", w.generate),
                      "/v1/completions": ("completions", w.completions),
                      "/v1/chat/completions": ("chat", w.chat)}
            if p in routes:
                name, fn = routes[p]
                w.requests[name] += 1
                w._local.raw = json.loads(json.dumps(body))
                try:
                    out = fn(body)
                    if p == "/generate" and isinstance(body, dict) and body.get("stream"):
                        return self._stream(out)
                    return self._send(200, out)
                except Exception as e:
                    w.invalid.append({"path": p, "error": f"{type(e).__name__}: {e}"[:500],
                                      "body": body})
                    return self._send(400, {"error": {"message": str(e)[:500]}})
            if p == "/flush_cache":
                for e in w.engines:
                    e.flush()
                return self._send(200, text="Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")
            if p == "/abort_request":
                return self._send(200, text="")
            if p == "/_conformance/evict":
                w.engines[body.get("rank", 0)].evict(body["tokens"])
                return self._send(200, {})
            if p == "/_conformance/load":
                w.engines[body.get("rank", 0)].load.update(body["load"])
                return self._send(200, {})
            if p == "/_conformance/writeback":
                n = w.engines[body.get("rank", 0)].host_writeback(body.get("evict_gpu", True))
                return self._send(200, {"pages": n})
            return self._send(404, {"detail": "Not Found"})

        do_PUT = do_POST

    return H


def main():
    cfg = json.loads(sys.argv[1])
    try:
        w = Worker(cfg)
    except Exception:
        traceback.print_exc()
        sys.exit(2)
    srv = ThreadingHTTPServer((cfg["host"], cfg["port"]), make_handler(w))
    srv.daemon_threads = True
    print(f"listening on http://{cfg['host']}:{srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    finally:
        w.stop.set()
        for e in w.engines:
            e.shutdown()


if __name__ == "__main__":
    main()
