"""What the client saw: loadgen's `--records` JSON lines reduced to counts and times around a
fault. loadgen's times are simulated ms from its run start (wall x `--sim-speedup`); the suite
maps them to wall seconds since the loadgen process was spawned, so times near a fault are
approximate by loadgen's start-up (tens of ms) and are never asserted on."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path


def load(path: Path) -> list[dict]:
    """The records of one loadgen run; unreadable lines are skipped (loadgen writes them at the end)."""
    out = []
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict):
            out.append(r)
    return out


def _wall(r: dict, key: str, speedup: float) -> float:
    v = r.get(key)
    return float(v) / speedup / 1000.0 if isinstance(v, (int, float)) else 0.0


def start_s(r: dict, speedup: float) -> float:
    return _wall(r, "start_ms", speedup)


def e2e_s(r: dict, speedup: float) -> float:
    return _wall(r, "e2e_ms", speedup)


def end_s(r: dict, speedup: float) -> float:
    return start_s(r, speedup) + e2e_s(r, speedup)


def error_kind(err: str | None) -> str:
    """A short, stable label for an error string (digits and URLs dropped)."""
    if not err:
        return "none"
    e = err.lower()
    for needle, kind in (("connection refused", "connection refused"),
                         ("connect", "connect error"),
                         ("timed out", "timeout"), ("timeout", "timeout"),
                         ("incomplete", "broken body"), ("broken", "broken body"),
                         ("error decoding", "broken body"), ("body", "broken body"),
                         ("closed", "connection closed"), ("reset", "connection reset")):
        if needle in e:
            return kind
    head = err.split(":", 1)[0]
    return "".join(c for c in head if not c.isdigit())[:40].strip() or "other"


def _ok(r: dict) -> bool:
    return r.get("status") == "ok"


def summarize(recs: list[dict], speedup: float, fault_s: float | None = None,
              worker: str | None = None) -> dict:
    """Counts over every record, plus (with `fault_s`, wall seconds after loadgen's start) the
    requests in flight at the fault and the recovery times; `worker` narrows the "affected path"
    figures to requests answered by that worker URL."""
    status = Counter(r.get("status", "missing") for r in recs)
    failed = [r for r in recs if r.get("status") == "failed"]
    http = [r.get("http_status") for r in failed]
    s = {
        "sent": len(recs),
        "ok": status.get("ok", 0),
        "failed": status.get("failed", 0),
        "cancelled": status.get("cancelled", 0),
        # A 2xx head then a failure: the body was cut (visible to the client as an error).
        "failed_after_head": sum(1 for h in http if isinstance(h, int) and 200 <= h < 300),
        "failed_http_status": dict(sorted(Counter(str(h) for h in http if isinstance(h, int)
                                                  and not 200 <= h < 300).items())),
        "failed_no_response": sum(1 for h in http if h is None),
        "error_kinds": dict(sorted(Counter(error_kind(r.get("error")) for r in failed).items())),
        # ok but no finish_reason: a silently truncated response (issue 12, finding 5).
        "ok_without_finish": sum(1 for r in recs if _ok(r) and not r.get("finish_reason")),
    }
    # The longest request in wall seconds (answered or failed): a leg left waiting shows here.
    s["longest_s"] = round(max((_wall(r, "e2e_ms", speedup) for r in recs), default=0.0), 3)
    if fault_s is None:
        return s
    during = [r for r in recs if start_s(r, speedup) <= fault_s < end_s(r, speedup)]
    s["in_flight_at_fault"] = len(during)
    s["in_flight_ok"] = sum(1 for r in during if _ok(r))
    s["in_flight_failed_after_head"] = sum(
        1 for r in during if not _ok(r) and isinstance(r.get("http_status"), int) and 200 <= r["http_status"] < 300)
    after_ok = [end_s(r, speedup) for r in recs if _ok(r) and start_s(r, speedup) >= fault_s]
    s["first_ok_after_s"] = round(min(after_ok) - fault_s, 3) if after_ok else None
    fails_after = [end_s(r, speedup) for r in failed if end_s(r, speedup) >= fault_s]
    s["last_failure_after_s"] = round(max(fails_after) - fault_s, 3) if fails_after else None
    if worker is not None:
        mine = [r for r in recs if r.get("worker") == worker]
        s["worker_requests"] = len(mine)
        w_ok = [end_s(r, speedup) for r in mine if _ok(r) and start_s(r, speedup) >= fault_s]
        s["worker_first_ok_after_s"] = round(min(w_ok) - fault_s, 3) if w_ok else None
    return s


def invariant_violations(s: dict, expect_sent: int | None = None) -> list[str]:
    """The quick form's invariants on the client side: nothing lost without an error the
    client sees, nothing silently truncated."""
    bad = []
    if s["sent"] == 0:
        bad.append("loadgen recorded no request")
    if expect_sent is not None and s["sent"] != expect_sent:
        bad.append(f"loadgen recorded {s['sent']} of {expect_sent} requests")
    if s["cancelled"]:
        bad.append(f"{s['cancelled']} requests still in flight when loadgen gave up (no answer, no error)")
    if s["ok_without_finish"]:
        bad.append(f"{s['ok_without_finish']} ok responses without a finish_reason (silent truncation)")
    if s["ok"] == 0:
        bad.append("no request succeeded")
    return bad
