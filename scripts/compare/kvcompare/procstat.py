"""CPU seconds and peak RSS of a process tree, read from /proc (Linux only)."""

from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    return raw[raw.rfind(")") + 2:].split()


def descendants(pid: int) -> list[int]:
    """`pid` and every live descendant."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        f = _stat_fields(int(entry))
        if f is None:
            continue
        children.setdefault(int(f[1]), []).append(int(entry))  # f[1] = ppid
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the tree rooted at `pid` (live processes only)."""
    total = 0
    for p in descendants(pid):
        f = _stat_fields(p)
        if f is not None:
            total += int(f[11]) + int(f[12])  # utime, stime (fields 14, 15)
    return total / _TICK


def peak_rss_mb(pid: int) -> float:
    """Sum over the tree of each process's VmHWM (peak resident set), in MiB."""
    kb = 0
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        kb += int(line.split()[1])
                        break
        except OSError:
            pass
    return kb / 1024


def host_stall(pressure: str = "/proc/pressure/memory", vmstat: str = "/proc/vmstat") -> dict:
    """The host's memory-stall counters: `memory_full_s`, the seconds every runnable task waited
    on memory (PSI "full" total), and `oom_kills` (the kernel's count). A run whose delta of
    either is non-zero was slowed by the machine, not by what it measures (the mocks count
    simulated time from the wall clock, so a 15 s freeze reads as 150 s at --speedup 10).
    Missing files (no PSI, not Linux) read as None."""
    out: dict = {"memory_full_s": None, "oom_kills": None}
    try:
        with open(pressure) as f:
            for line in f:
                if line.startswith("full "):
                    total = dict(kv.split("=", 1) for kv in line.split()[1:]).get("total")
                    out["memory_full_s"] = int(total) / 1e6 if total is not None else None
    except (OSError, ValueError):
        pass
    try:
        with open(vmstat) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    out["oom_kills"] = int(value)
    except (OSError, ValueError):
        pass
    return out


def stall_delta(before: dict, after: dict) -> dict:
    """`after - before` of each counter of `host_stall` (None when either side lacks it)."""
    return {k: (after[k] - before[k] if before.get(k) is not None and after.get(k) is not None else None)
            for k in ("memory_full_s", "oom_kills")}


def stall_warning(rec: dict) -> str:
    """A progress-line suffix naming a host stall during the run ("" when there was none)."""
    full, kills = rec.get("host_memory_full_s"), rec.get("host_oom_kills")
    if (full or 0) < 1.0 and not kills:
        return ""
    return f" HOST STALLED (memory full {full or 0:.1f} s, OOM kills {kills or 0}): do not trust this row"
