"""Virtualenvs the harness needs: its own (matplotlib) and one per PyPI peer router.

sglang-router 0.3.2 and smg 1.13 both install a console script named `smg`, so each peer gets
its own venv. All live under `<repo>/.bench-venv/` (gitignored) unless a path is given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HARNESS_REQS = ["matplotlib"]
PEERS = {
    "sglr": ("sglang-router==0.3.2", "sglang_router"),
    "smg": ("smg==1.13.*", "smg"),
}


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _has(venv: Path, module: str) -> bool:
    py = _python(venv)
    if not py.exists():
        return False
    r = subprocess.run([str(py), "-c", f"import {module}"], capture_output=True)
    return r.returncode == 0


def ensure(venv: Path, requirements: list[str], probe_module: str) -> Path:
    """Creates `venv` and pip-installs `requirements` unless `probe_module` already imports there."""
    if _has(venv, probe_module):
        return venv
    print(f"[venv] creating {venv} with {' '.join(requirements)} (one-time)", flush=True)
    if not _python(venv).exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(_python(venv)), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *requirements], check=True)
    if not _has(venv, probe_module):
        raise RuntimeError(f"{venv}: `import {probe_module}` still fails after installing {requirements}")
    return venv


def ensure_peer(root: Path, key: str, override: str | None) -> Path:
    """The venv of peer `key` ("sglr" or "smg"): `override` if given, else `<root>/<key>`."""
    requirement, module = PEERS[key]
    venv = Path(override) if override else root / key
    return ensure(venv, [requirement], module)


def peer_version(venv: Path, dist: str) -> str:
    r = subprocess.run([str(_python(venv)), "-c",
                        f"import importlib.metadata as m; print(m.version('{dist}'))"],
                       capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def reexec_in_harness_venv(root: Path) -> None:
    """Re-runs this script inside `<root>/harness` (created with matplotlib on first use)."""
    venv = root / "harness"
    if Path(sys.prefix).resolve() == venv.resolve():
        return
    try:
        ensure(venv, HARNESS_REQS, "matplotlib")
    except (OSError, subprocess.CalledProcessError, RuntimeError) as e:
        print(f"[venv] cannot prepare {venv} ({e}); continuing without charts", flush=True)
        return
    py = str(_python(venv))
    os.execv(py, [py, *sys.argv])
