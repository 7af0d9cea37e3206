"""What every measured suite sets up before it measures: the binaries (built or given), the
peers' venvs, and the provenance recorded in a results file (git, machine, binaries)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from pathlib import Path

from . import procs, routers, venvs

REPO = Path(__file__).resolve().parent.parent.parent.parent


def build_binaries(a, log_dir: Path) -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if a.bin_dir:
        bin_dir = Path(a.bin_dir)
    else:
        bin_dir = target / "release"
        if not a.no_build:
            print("[build] cargo build --release --bins", flush=True)
            rc = procs.run(["cargo", "build", "--release", "--bins"], log_dir / "cargo-build.log",
                           timeout=1800, cwd=str(REPO))
            if rc != 0:
                raise SystemExit(f"cargo build failed (rc {rc}); see {log_dir / 'cargo-build.log'}")
    for b in ("router", "sglang-mock", "loadgen"):
        if not (bin_dir / b).exists():
            raise SystemExit(f"missing binary {bin_dir / b} (build it, or pass --bin-dir)")
    return bin_dir


def out_dir(a, prefix: str) -> Path:
    """`--out`, else target/compare/<prefix>-<UTC time>; created."""
    out = Path(a.out or REPO / "target" / "compare" / (prefix + "-" + dt.datetime.utcnow().strftime("%Y%m%d-%H%M%S")))
    out.mkdir(parents=True, exist_ok=True)
    return out


def csv(s: str) -> list[str]:
    """A comma-separated flag value as a list, blanks dropped."""
    return [t.strip() for t in s.split(",") if t.strip()]


def git_describe() -> str:
    r = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def describe_bins(bin_dir: Path, a) -> str:
    """Where the measured binaries came from (a --bin-dir may hold an older build than HEAD)."""
    mtime = dt.datetime.utcfromtimestamp((bin_dir / "router").stat().st_mtime).strftime("%Y-%m-%d %H:%M UTC")
    how = "prebuilt --bin-dir" if a.bin_dir else "cargo build --release --bins"
    return f"{how} {bin_dir} (router built {mtime})"


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}"


def peer_venv(root: Path, key: str, override: str | None) -> Path | None:
    try:
        return venvs.ensure_peer(root, key, override)
    except (OSError, subprocess.CalledProcessError, RuntimeError) as e:
        print(f"[venv] {key}: cannot prepare its venv ({e}); its routers are skipped", flush=True)
        return None


def prepare_routers(a, selected: list[routers.RouterSpec], bin_dir: Path, model_dir: Path,
                    log_dir: Path) -> tuple[list[routers.RouterSpec], routers.Launch, dict]:
    """Prepares the peers' venvs the selection needs, drops the routers whose venv cannot be made,
    and returns (routers left, their Launch, meta keys naming the peers' versions)."""
    families = {r.family for r in selected}
    root = Path(a.venv_root)
    sglr = peer_venv(root, "sglr", a.sglr_venv) if "sglr" in families else None
    smg = peer_venv(root, "smg", a.smg_venv) if "smg" in families else None
    missing = {f for f, v in (("sglr", sglr), ("smg", smg)) if f in families and v is None}
    left = [r for r in selected if r.family not in missing]
    launch = routers.Launch(router_bin=bin_dir / "router", sglr_venv=sglr, smg_venv=smg,
                            model_dir=model_dir, page_size=16, log_dir=log_dir)
    meta = {"sglr_version": venvs.peer_version(sglr, "sglang-router") if sglr else None,
            "smg_version": venvs.peer_version(smg, "smg") if smg else None,
            "skipped_families": sorted(missing)}
    return left, launch, meta
