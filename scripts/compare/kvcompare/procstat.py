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
