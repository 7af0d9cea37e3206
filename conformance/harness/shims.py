"""Import SGLang's pure-Python parts on a machine without torch, CUDA or a model.

What this replaces, and nothing else:
  * third-party roots SGLang's import chain touches but the harness never runs (torch's CUDA
    side, triton, transformers, ...): permissive fake modules through ``sys.meta_path``,
    appended last, so every package that *is* installed (numpy, pydantic, msgspec, zmq,
    openai, orjson) is the real one;
  * the few torch calls the radix tree makes on its values (``torch.tensor``, ``empty``,
    ``cat``, slicing, ``clone``, ``to``, ``iinfo``): a list-backed ``Tensor`` below. The
    tree's values are KV slot indices; the harness never reads them;
  * ``mem_cache/cpp_utils/native_hash.py``'s C++ extension (built by torch's cpp loader):
    SGLang's own ``hash_binding.cpp`` compiled with pybind11 when a compiler is there
    (``native.py``), else its transcription ``py_native_hash`` below.

``install()`` must run before the first ``import sglang``.
"""

from __future__ import annotations

import abc
import hashlib
import importlib.abc
import importlib.machinery
import sys
import types

STUB_ROOTS = {
    "torch", "triton", "PIL", "transformers", "tqdm", "IPython", "compressed_tensors",
    "safetensors", "sentencepiece", "huggingface_hub", "tvm_ffi", "dill", "torchvision",
    "gguf", "psutil", "pybase64", "requests", "starlette", "aiohttp", "regex", "uvloop",
    "fastapi", "uvicorn", "setproctitle", "sgl_kernel", "flashinfer", "einops", "partial_json_parser",
    "outlines", "llguidance", "openai_harmony", "interegular", "jsonschema",
    "pynvml", "prometheus_client", "hf_transfer", "modelscope", "decord", "soundfile",
    "scipy", "blobfile", "tiktoken", "cuda", "nvidia", "numba", "av", "timm", "torchao",
    "py_spy", "datasets", "pandas", "grpc", "google", "mooncake", "nixl", "pybind11_stubs",
    "numpy",  # real numpy wins when installed (the finder is last)
    "orjson", "msgpack", "httpx", "anyio", "sniffio", "jinja2", "yaml", "sympy", "cpuinfo",
}


class _Meta(abc.ABCMeta):
    def __new__(mcls, name, bases, ns, **kw):
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

    def register(cls, *a, **k):
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


# ---- the torch surface the radix tree uses on its values ---------------------------------

class Tensor:
    """A 1-D int tensor backed by a list (the radix tree's KV index values)."""

    def __init__(self, data=()):
        self.data = [int(x) for x in data]

    def __len__(self):
        return len(self.data)

    def __iter__(self):
        return iter(self.data)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return Tensor(self.data[idx])
        return self.data[idx]

    def clone(self):
        return Tensor(self.data)

    def to(self, *a, **k):
        return Tensor(self.data)

    def tolist(self):
        return list(self.data)

    def numel(self):
        return len(self.data)

    def __repr__(self):
        return f"Tensor({self.data})"


class _Device:
    def __init__(self, kind="cpu"):
        self.type = str(kind)

    def __eq__(self, other):
        return str(other) == self.type

    def __hash__(self):
        return hash(self.type)

    def __str__(self):
        return self.type


class _IInfo:
    def __init__(self, dtype):
        self.max = 2**63 - 1
        self.min = -(2**63)


def _torch_module():
    t = _Mod("torch")
    t.__path__ = []
    t.__version__ = "2.9.0"
    t.version = _Mod("torch.version")
    t.version.__dict__.update(hip=None, cuda=None, musa=None, git_version="")
    t.Tensor = Tensor
    t.device = _Device
    t.int64 = "int64"
    t.int32 = "int32"
    t.iinfo = _IInfo
    t.tensor = lambda data, dtype=None, device=None, **k: Tensor(data)
    t.empty = lambda shape, dtype=None, device=None, **k: Tensor(
        [0] * (shape[0] if isinstance(shape, tuple) else int(shape)))
    t.cat = lambda values, *a, **k: Tensor([x for v in values for x in v])
    t.arange = lambda *a, **k: Tensor(range(*[int(x) for x in a]))
    return t


# SGLang's own modules that the harness's objects import only for type names or for GPU
# code paths (kernels, quantization layers, memory pools): fake, so their CUDA-only import
# chains do not run. Everything the harness drives (radix_cache, base_prefix_cache, events,
# kv_events, load_publisher, server_args, io_struct, the OpenAI protocol) is SGLang's file.
SGLANG_STUBS = (
    "sglang.srt.layers",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.mem_cache.allocator",
    "sglang.kernels",
    "sglang.jit_kernel",
)


def _stubbed(fullname):
    root = fullname.split(".")[0]
    if root in STUB_ROOTS:
        # a submodule of a real installed package (``from .x import NAME`` probing) is
        # never faked: only the tree under a faked root is
        return root == fullname or isinstance(sys.modules.get(root), _Mod)
    return any(fullname == p or fullname.startswith(p + ".") for p in SGLANG_STUBS)


class _FirstFinder(importlib.abc.MetaPathFinder):
    """Claims SGLANG_STUBS before the real files are found."""

    def __init__(self, loader):
        self.loader = loader

    def find_spec(self, fullname, path, target=None):
        if any(fullname == p or fullname.startswith(p + ".") for p in SGLANG_STUBS):
            return importlib.machinery.ModuleSpec(fullname, self.loader, is_package=True)
        return None


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if _stubbed(fullname):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        if spec.name == "torch":
            return _torch_module()
        if spec.name == "torch.version":
            return sys.modules["torch"].version
        m = _Mod(spec.name)
        m.__path__ = []
        m.__version__ = "0.0.0"
        if spec.name == "dill":
            m.dumps = lambda obj, *a, **k: b""
            m.loads = lambda b, *a, **k: None
        return m

    def exec_module(self, module):
        pass


# ---- hash_binding.cpp (mem_cache/cpp_utils) in Python: the u32 and wide paths -----------

def _hash_page(prior: bytes | None, data: bytes, wide: bool = False) -> bytes:
    h = hashlib.sha256()
    if prior is not None:
        h.update(prior)
    if wide:
        h.update(b"\xff")  # hash_binding.cpp: an odd byte count marks the wide encoding
    h.update(data)
    return h.digest()


def _page_bytes(tokens) -> tuple[bytes, bool]:
    if any(t > 0xFFFFFFFF for t in tokens):
        return b"".join(int(t).to_bytes(8, "little") for t in tokens), True
    return b"".join(int(t).to_bytes(4, "little") for t in tokens), False


class PyNativeHash:
    """``get_hash(raw, logical_len, unit_width, is_bigram, prior_digest, page_size)``."""

    @staticmethod
    def get_hash(raw, logical_len, unit_width, is_bigram, prior_digest, page_size=None):
        if is_bigram or unit_width != 1:
            raise NotImplementedError("bigram / tuple tokens: not used by the harness")
        toks = list(raw[:logical_len])
        prior = prior_digest
        if page_size is None:
            data, wide = _page_bytes(toks)
            return _hash_page(prior, data, wide).hex()
        out = []
        for i in range(0, logical_len, page_size):
            data, wide = _page_bytes(toks[i:i + page_size])
            prior = _hash_page(prior, data, wide)
            out.append(prior.hex())
        return out


_installed = False
NATIVE_HASH_SOURCE = "python transcription of hash_binding.cpp"


def install(native_module=None) -> None:
    """Install the finder; then point SGLang's native hash at ``native_module`` (the
    compiled hash_binding.cpp) or the Python transcription."""
    global _installed, NATIVE_HASH_SOURCE
    if _installed:
        return
    finder = _Finder()
    sys.meta_path.insert(0, _FirstFinder(finder))
    sys.meta_path.append(finder)
    _installed = True
    try:
        from sglang.srt.mem_cache.cpp_utils import native_hash as nh
    except ImportError:  # older SGLang hashes pages in Python (hashlib) itself
        NATIVE_HASH_SOURCE = "SGLang's own Python page hash (no native extension in this version)"
        return
    impl = native_module if native_module is not None else PyNativeHash
    if native_module is not None:
        NATIVE_HASH_SOURCE = "SGLang's hash_binding.cpp, compiled with pybind11"
    nh._load_native_hash_module = lambda: impl
