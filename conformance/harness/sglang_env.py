"""The SGLang objects the harness uses, imported from the installed package, with what
this version lacks recorded as a reason (checks that need it are skipped with that reason).
"""

from __future__ import annotations

import importlib
import types


def _try(modname):
    try:
        return importlib.import_module(modname), None
    except Exception as e:  # an absent module in an older version
        return None, f"{modname}: {type(e).__name__}: {e}"


def load(native_module=None):
    from . import shims

    shims.install(native_module)
    import sglang

    S = types.SimpleNamespace(version=sglang.__version__, missing={},
                              native_hash=shims.NATIVE_HASH_SOURCE)
    S.torch = importlib.import_module("torch")

    rc, why = _try("sglang.srt.mem_cache.radix_cache")
    if rc is None:
        raise RuntimeError(f"SGLang {S.version}: no radix cache ({why})")
    S.RadixCache, S.RadixKey = rc.RadixCache, rc.RadixKey
    bpc = importlib.import_module("sglang.srt.mem_cache.base_prefix_cache")
    S.MatchPrefixParams = getattr(bpc, "MatchPrefixParams", None)
    S.InsertParams = getattr(bpc, "InsertParams", None)
    S.EvictParams = getattr(bpc, "EvictParams", None)
    import inspect

    S.radix_key_has_salt = "cache_salt" in inspect.signature(rc.RadixKey.__init__).parameters

    kv, why = _try("sglang.srt.disaggregation.kv_events")
    S.kv_events = kv
    S.KVEventBatch = kv.KVEventBatch
    S.EventPublisherFactory = kv.EventPublisherFactory
    S.StorageMedium = getattr(kv, "StorageMedium", None)
    S.namespaced_block_hash = getattr(kv, "namespaced_block_hash", None)
    if S.namespaced_block_hash is None:
        S.missing["namespaces"] = "disaggregation/kv_events.py has no namespaced_block_hash"

    m, why = _try("sglang.srt.managers.scheduler_components.kv_events_publisher")
    S.kv_events_publisher_mod = m
    S.SchedulerKvEventsPublisher = getattr(m, "SchedulerKvEventsPublisher", None) if m else None
    m, why = _try("sglang.srt.managers.scheduler_components.load_publisher")
    S.load_publisher_mod = m
    S.SchedulerLoadPublisher = getattr(m, "SchedulerLoadPublisher", None) if m else None
    if S.SchedulerLoadPublisher is None:
        S.missing["load_publisher"] = why or "no SchedulerLoadPublisher"
    m, why = _try("sglang.srt.managers.load_snapshot")
    S.load_snapshot_mod = m
    if m is None:
        S.missing["v1_loads"] = why

    sa = importlib.import_module("sglang.srt.server_args")
    S.ServerArgs = sa.ServerArgs
    common = importlib.import_module("sglang.srt.utils.common")
    S.build_server_info = getattr(common, "build_server_info", None)
    rt, why = _try("sglang.srt.runtime_context")
    S.describe_kv_events_publisher = getattr(rt, "describe_kv_events_publisher", None) if rt else None
    S.get_parallel = getattr(rt, "get_parallel", None) if rt else None
    if S.describe_kv_events_publisher is None:
        S.missing["kv_events_block"] = "no runtime_context.describe_kv_events_publisher"
    st, why = _try("sglang.srt.observability.startup_time")
    S.build_scheduler_startup_time = getattr(st, "build_scheduler_startup_time", None) if st else None
    hs, why = _try("sglang.srt.mem_cache.hicache_storage")
    S.disabled_l3_layout = getattr(hs, "disabled_l3_layout", None) if hs else None

    io = importlib.import_module("sglang.srt.managers.io_struct")
    S.GenerateReqInput = io.GenerateReqInput
    ac, why = _try("sglang.srt.entrypoints.api_contract")
    S.generate_contract_error = getattr(ac, "generate_contract_error", None) if ac else None
    proto = importlib.import_module("sglang.srt.entrypoints.openai.protocol")
    S.ChatCompletionRequest = proto.ChatCompletionRequest
    S.CompletionRequest = proto.CompletionRequest
    return S
