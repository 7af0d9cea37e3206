"""kvrouter: the KV-cache-aware router for SGLang workers, packaged as a wheel.

The wheel installs the Rust binary ``router`` into the environment's scripts directory;
``binary()`` finds it and ``kvrouter`` / ``python -m kvrouter`` run it (see ``__main__``);
``kvrouter.launch_router`` is sgl-router's in-process launcher shape (``RouterArgs``,
``launch_router``) for frameworks that start their router from Python (miles, slime).
"""

import os
import shutil
import sys
import sysconfig

__all__ = ["binary"]

_NAME = "router.exe" if os.name == "nt" else "router"


def binary() -> str:
    """Path of the bundled ``router`` binary (FileNotFoundError when the wheel lacks it)."""
    candidates = []
    for scheme in (None, f"{os.name}_user"):
        try:
            path = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if path:
            candidates.append(os.path.join(path, _NAME))
    candidates.append(os.path.join(os.path.dirname(sys.executable), _NAME))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which(_NAME)
    if found:
        return found
    raise FileNotFoundError(f"kvrouter: the bundled {_NAME} binary is not installed (looked in {candidates})")
