"""SGLang's native page hash (``mem_cache/cpp_utils/hash_binding.cpp``) built with pybind11
and g++ instead of torch's extension loader, cached under target/. When it cannot be
built, the worker uses shims.PyNativeHash (its transcription) and the run says so."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig


def build(target_dir):
    """(path of the built module or None, reason when None)."""
    try:
        import pybind11
    except ImportError:
        return None, "pybind11 not installed"
    import importlib.metadata as md

    ver = md.version("sglang")
    spec = importlib.util.find_spec("sglang")
    src = os.path.join(os.path.dirname(spec.origin), "srt", "mem_cache", "cpp_utils",
                       "hash_binding.cpp")
    if not os.path.exists(src):
        return None, f"no {src}"
    out_dir = os.path.join(target_dir, "conformance-native", ver)
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "hicache_hash_cpp" + sysconfig.get_config_var("EXT_SUFFIX"))
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(src):
        return out, None
    cmd = ["g++", "-O3", "-std=c++17", "-DNDEBUG", "-shared", "-fPIC",
           "-DTORCH_EXTENSION_NAME=hicache_hash_cpp",
           f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}",
           src, "-o", out, "-lcrypto"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"g++: {e}"
    if r.returncode != 0:
        return None, "g++ failed: " + r.stderr.strip().splitlines()[-1][:200]
    return out, None


def load(path):
    if not path:
        return None
    spec = importlib.util.spec_from_file_location("hicache_hash_cpp", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
