#!/usr/bin/env python3
"""Reference `/server_info` bodies and a `LoadStat` frame from SGLang 0.5.23's own code.

Run:  target/conformance-venv-0.5.23/bin/python crates/sim/tests/data/server_info/gen.py
(a venv with `sglang==0.5.23` installed `--no-deps`, plus `msgspec==0.23.0`, `pyzmq`,
`pydantic`, `typing_extensions`, `packaging`: `KVEventsConfig` is a pydantic model, so
pydantic must be real for the `kv_events` block).

What runs is SGLang's: `ServerArgs(model_path="dummy", load_format="dummy", ...)` and its
`__post_init__` resolution, `sglang.srt.utils.common.build_server_info` (resolved ServerArgs +
`launch_command` + scheduler init info + `kv_events` from
`runtime_context.describe_kv_events_publisher`), the per-rank state from
`SchedulerInternalStateController.get_internal_state`
(`managers/scheduler_components/internal_state.py`), the top-level keys added by
`entrypoints/http_server.py::server_info` (`startup_time`, `internal_states`, `version`,
`frontend`), and `LoadStat` encoded by `managers/scheduler_components/load_publisher.py`'s
own `msgspec` encoder.

STUBS (torch is not installed): every other third-party module the import chain needs
(torch, triton, numpy, transformers, pydantic, PIL, ... : the list is
`STUB_ROOTS` below) is replaced through `sys.meta_path` by a permissive fake module whose
attributes are inert classes (falsy, empty, callable). `torch.npu` is absent so SGLang's
platform probe picks no accelerator. Nothing stubbed feeds a value into the bodies except:
`internal_states[i]` is `SchedulerInternalStateController.get_internal_state`'s shape
transcribed (its module's import chain, the model configs, does not survive the stubs):
the resolved ServerArgs dict plus `_add_topology` and `_add_memory_usage`
(`build_memory_usage` itself is called), with what a dummy-model CPU scheduler reports
(`effective_max_running_requests_per_dp` 256 as 0.5.23 reported for the dummy model,
`max_total_num_tokens` 65536 the mock's default), and
`scheduler_info` is built with the keys of `Scheduler.get_init_info` (`managers/scheduler.py`).
"""

import abc
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types

STUB_ROOTS = {
    "numpy", "orjson", "psutil", "pybase64", "requests", "torch", "triton", "PIL",
    "starlette",
    "transformers", "tqdm", "IPython", "aiohttp", "regex", "compressed_tensors",
    "safetensors", "sentencepiece", "huggingface_hub", "tvm_ffi", "dill", "torchvision",
    # appended by hand while walking the import chain:
    "gguf",
}


class _Meta(abc.ABCMeta):
    def __new__(mcls, name, bases, ns, **kw):  # class kwargs (total=False, ...) ignored
        return super().__new__(mcls, name, bases, ns)

    def __init__(cls, name, bases, ns, **kw):
        super().__init__(name, bases, ns)

    def __getattr__(cls, name):
        if name == "__class_validators__":
            return ()
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _new(name)

    def __call__(cls, *a, **k):
        if len(a) == 1 and isinstance(a[0], types.FunctionType) and not k:
            return a[0]  # used as a decorator
        return _new("call")

    def __getitem__(cls, k):
        return _new("item")

    def __setitem__(cls, k, v):
        pass

    def register(cls, *a, **k):  # shadows ABCMeta.register (e.g. CONFIG_MAPPING.register)
        return a[-1] if a else None

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False

    def __or__(cls, o):
        return cls

    __ror__ = __or__

    def __len__(cls):
        return 0

    def __int__(cls):
        return 0

    __index__ = __int__

    def __float__(cls):
        return 0.0

    def __lt__(cls, o):
        return False

    __gt__ = __le__ = __ge__ = __lt__

    def __enter__(cls):
        return cls

    def __exit__(cls, *a):
        return False


def _same(cls, *a):
    return cls


for _op in ("neg", "pos", "abs", "invert", "add", "radd", "sub", "rsub", "mul", "rmul",
            "truediv", "rtruediv", "floordiv", "rfloordiv", "mod", "rmod", "pow", "rpow",
            "and", "rand", "xor", "rxor", "lshift", "rshift", "matmul"):
    setattr(_Meta, f"__{_op}__", _same)


def _new(name):
    return _Meta(name, (), {})


class _Mod(types.ModuleType):
    def __getattr__(self, name):
        if name == "npu" or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        v = _new(name)
        setattr(self, name, v)
        return v


# Attributes whose value must be real (a stub class would leak into JSON, or make SGLang
# believe in an accelerator: torch.version.hip/cuda not None).
def _module(name, **attrs):
    m = _Mod(name)
    m.__dict__.update(attrs)
    return m


FAKE_ATTRS = {
    "dill": {"dumps": lambda obj, *a, **k: b"", "loads": lambda b, *a, **k: None},
    "torch": {
        "__version__": "2.9.0",
        "version": _module("torch.version", hip=None, cuda=None, musa=None, git_version=""),
    },
}


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUB_ROOTS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _Mod(spec.name)
        m.__path__ = []
        m.__version__ = "0.0.0"
        if spec.name == "torch.version":
            return FAKE_ATTRS["torch"]["version"]
        m.__dict__.update(FAKE_ATTRS.get(spec.name, {}))
        return m

    def exec_module(self, module):
        pass


sys.meta_path.append(_Finder())  # last: real installed packages win

import msgspec  # noqa: E402

import sglang  # noqa: E402
from sglang.srt.managers.scheduler_components import load_publisher  # noqa: E402
from sglang.srt.managers.scheduler_components.load_publisher import LoadStat  # noqa: E402
from sglang.srt.managers.scheduler_components.memory_usage import (  # noqa: E402
    build_memory_usage,
)
from sglang.srt.mem_cache.hicache_storage import disabled_l3_layout  # noqa: E402
from sglang.srt.observability.startup_time import build_scheduler_startup_time  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.utils.common import build_server_info  # noqa: E402

OUT = os.path.dirname(os.path.abspath(__file__))
MAX_TOTAL = 65536
MAX_RUNNING = 256
# Left None by resolution for a dummy model (the model runner picks it); 16 is what the
# reference run reported as block_size and the mock's default.
PAGE_SIZE = 16
# Scheduler.startup_time: durations of the startup phases (a model-free scheduler: zeros).
STARTUP = build_scheduler_startup_time(
    target_load_weight=0.0, draft_load_weight=0.0, kv_cache_allocation=0.0,
    scheduler_e2e=0.0, target_cuda_graph=None, draft_cuda_graph=None,
)


def kv(**cfg):
    return json.dumps({"publisher": "zmq", **cfg})


CASES = {
    "default": {},
    "dp2": {"dp_size": 2, "kv_events_config": kv(endpoint="tcp://*:5557")},
    "kv_star": {"kv_events_config": kv(endpoint="tcp://*:5557")},
    "kv_any_replay": {
        "kv_events_config": kv(
            endpoint="tcp://0.0.0.0:19078", replay_endpoint="tcp://0.0.0.0:19079"
        )
    },
    "kv_bind": {
        "kv_events_config": kv(
            endpoint="tcp://127.0.0.1:19088",
            replay_endpoint="tcp://127.0.0.1:19089",
            bind=True,
        )
    },
    "load_auto": {
        "kv_events_config": kv(
            endpoint="tcp://*:19001", replay_endpoint="tcp://*:19002"
        ),
        "load_publish_endpoint": "auto",
    },
    "load_auto_dp2": {
        "dp_size": 2,
        "kv_events_config": kv(
            endpoint="tcp://*:19001", replay_endpoint="tcp://*:19002"
        ),
        "load_publish_endpoint": "auto",
    },
}


def body(overrides):
    args = ServerArgs(model_path="dummy", load_format="dummy", page_size=PAGE_SIZE, **overrides)
    args.resolve_once()  # what the launcher does before publishing (server_args.py)
    context_length = 2048  # what ServerArgs leaves to the model config (dummy model)
    scheduler_info = {
        "status": "ready",
        "max_total_num_tokens": MAX_TOTAL,
        "max_req_input_len": context_length - 1,
        "startup_time": STARTUP,
        # Scheduler._hicache_l3_layout without hierarchical cache:
        "hicache_object_layout": disabled_l3_layout(
            "Hierarchical cache is disabled", page_size=PAGE_SIZE
        ),
    }
    info = build_server_info(args, scheduler_info)
    # `SchedulerInternalStateController.get_internal_state` (internal_state.py): the resolved
    # ServerArgs dict plus its contributors' keys for a plain (non-PD, non-spec) CPU scheduler.
    # Its module's import chain (model configs) does not survive the stubs, so its keys are
    # transcribed here: _add_topology, _add_memory_usage (`build_memory_usage`).
    internal = []
    state = dict(args.resolved_dict())
    state.pop("custom_sigquit_handler", None)
    state.update(
        world_size=args.dp_size * args.tp_size * args.pp_size,
        startup_time=STARTUP,
        effective_max_running_requests_per_dp=MAX_RUNNING,
        last_gen_throughput=0.0,
        memory_usage=build_memory_usage(
            weight_gb=0.0, kv_cache_gb=0.0, startup_available_gb=0.0,
            token_capacity=MAX_TOTAL, token_capacity_swa=None,
            target_graph_memory_usage=None, draft_graph_memory_usage=None,
        ),
    )
    for _rank in range(args.dp_size):
        internal.append(dict(state))
    full = {
        **info,
        "startup_time": STARTUP,
        "internal_states": internal,
        "version": sglang.__version__,
        "frontend": "python",
    }
    return msgspec.json.decode(msgspec.json.encode(full, enc_hook=str))


def main():
    for name, overrides in CASES.items():
        b = body(overrides)
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump(b, f, indent=1, sort_keys=False)
            f.write("\n")
        print(name, len(b), "keys; kv_events =", json.dumps(b.get("kv_events")))
    # LoadStat as SchedulerLoadPublisher.publish_load_stat builds it, encoded by the module's
    # own encoder (`load_publisher._encoder`). The first is the reference run's idle reading.
    stats = [
        [0, 0, 336, MAX_TOTAL, 0, 0, 336, MAX_RUNNING, 0, 0],
        [3, 2, 336, MAX_TOTAL, 1, 96, 432, MAX_RUNNING, 70000, 1234567],
    ]
    names = [f for f in LoadStat.__struct_fields__]
    out = []
    for fields in stats:
        enc = load_publisher._encoder.encode(LoadStat(**dict(zip(names, fields))))
        out.append({"fields": dict(zip(names, fields)), "hex": enc.hex()})
        print("LoadStat", enc.hex())
    with open(os.path.join(OUT, "load_stat.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    write_v1_loads()


def write_v1_loads():
    """One rank of `/v1/loads` as `LoadSnapshot.to_dict` (managers/load_snapshot.py) builds
    it from what `SchedulerLoadInquirer.get_loads` fills on a plain CPU scheduler (no spec,
    no LoRA: those sections are None and left out), plus the 400 text for a bad `include`."""
    from sglang.srt.managers import load_snapshot as ls

    snap = ls.LoadSnapshot(
        timestamp=0.0, dp_rank=0, max_total_num_tokens=MAX_TOTAL,
        max_running_requests=MAX_RUNNING,
        memory=ls.MemoryMetrics(weight_gb=0.0, kv_cache_gb=0.0, graph_gb=0.0,
                                token_capacity=MAX_TOTAL),
        disaggregation=ls.DisaggregationMetrics(mode="null"),
        queues=ls.QueueMetrics(waiting=0, grammar=0, paused=0, retracted=0,
                               prealloc_ready=0),
    )
    try:
        snap.to_dict({"bogus"})
        bad = None
    except ValueError as e:
        bad = str(e)
    out = {
        "all": msgspec.json.decode(msgspec.json.encode(snap.to_dict(None))),
        "core": msgspec.json.decode(msgspec.json.encode(snap.to_dict({"core"}))),
        "memory,queues": msgspec.json.decode(
            msgspec.json.encode(snap.to_dict({"memory", "queues"}))
        ),
        "bogus_error": bad,
    }
    with open(os.path.join(OUT, "v1_loads_rank.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")

if __name__ == "__main__":
    main()
