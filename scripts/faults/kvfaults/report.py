"""The results table (markdown) and the marked block it replaces in docs/benchmarks.md."""

from __future__ import annotations

import re

BEGIN, END = "<!-- faults:begin -->", "<!-- faults:end -->"


def _s(v) -> str:
    return "-" if v is None else f"{v:g} s" if isinstance(v, (int, float)) else str(v)


def recovery(row: dict) -> str:
    """The case's recovery times, in the order they happen."""
    parts = []
    for key, label in (("unhealthy_after_s", "marked unhealthy"),
                       ("not_ready_after_s", "/readiness not 200"),
                       ("attack_opened_in_s", "attack opened"),
                       ("health_ok_after_s", "/health 200"),
                       ("all_closed_after_s", "all slow conns closed"),
                       ("requests_p99_s", "good requests p99"), ("requests_max_s", "max"),
                       ("probe_p99_s", "/health p99"), ("probe_max_s", "max"),
                       ("drain_s", "drained, exit"),
                       ("all_healthy_after_s", "all healthy"),
                       ("index_agrees_after_s", "index = mocks after load")):
        if key in row:
            parts.append(f"{label} {_s(row[key])}")
    c = row.get("client", {})
    if c.get("first_ok_after_s") is not None and "drain_s" not in row:
        parts.append(f"first ok {_s(c['first_ok_after_s'])}")
    if c.get("worker_first_ok_after_s") is not None:
        parts.append(f"faulted worker's first ok {_s(c['worker_first_ok_after_s'])}")
    if c.get("last_failure_after_s") is not None:
        parts.append(f"last failure {_s(c['last_failure_after_s'])}")
    if "consumer_equals_relay_after_load_s" in row:
        parts.append(f"consumer = relay {_s(row['consumer_equals_relay_after_load_s'])} after load")
    return "; ".join(parts) or "-"


def client(row: dict) -> str:
    c = row.get("client")
    if not c:
        return "-"
    text = f"{c['sent']} / {c['ok']} / {c['failed']}"
    extra = []
    if c.get("failed_after_head"):
        extra.append(f"{c['failed_after_head']} cut after head")
    if c.get("failed_no_response"):
        extra.append(f"{c['failed_no_response']} no response")
    if c.get("failed_http_status"):
        extra.append("HTTP " + ", ".join(f"{k} x{v}" for k, v in c["failed_http_status"].items()))
    if c.get("in_flight_at_fault") is not None:
        extra.append(f"{c['in_flight_at_fault']} in flight at the fault, {c.get('in_flight_ok', 0)} of them ok")
    return text + (f" ({'; '.join(extra)})" if extra else "")


def memory(row: dict) -> str:
    before = row.get("rss_before_mb")
    after = row.get("rss_after_mb", row.get("rss_at_signal_mb"))
    text = f"{_mb(before)} -> {_mb(after)}"
    if row.get("rss_peak_mb") is not None:
        text += f" (peak {_mb(row['rss_peak_mb'])}, bound {_mb(row.get('bound_peak_mb'))})"
    if row.get("rss_under_attack_mb") is not None:
        text += f" (under attack {_mb(row['rss_under_attack_mb'])})"
    return text


def _mb(v) -> str:
    return "-" if v is None else f"{v:.0f} MB"


def mechanism(row: dict) -> str:
    """The router counters that show what handled the fault, plus case-specific evidence."""
    parts = []
    for name, by in sorted(row.get("counters", {}).items()):
        if name == "requests_total":
            continue
        inner = ", ".join(f"{k}={v:g}" if k else f"{v:g}" for k, v in by.items())
        parts.append(f"{name.removesuffix('_total')} {inner}")
    for key, label in (("upload_status", "uploads got"), ("oversized_status", "300 MiB got"),
                       ("front_blocks_peak", "capped worker's entries peak"), ("cap_blocks", "cap"),
                       ("index_minus_mock_blocks", "index - mock blocks"), ("exit_code", "exit"),
                       ("readiness_after_signal", "readiness after signal"),
                       ("attack_connected", "slow conns connected"),
                       ("attack_connect_failed", "connects timed out"), ("attack_closed_by_router", "closed by router"),
                       ("flood_opened", "flood conns opened"), ("flood_closed_by_router", "closed by router"),
                       ("probes", "probes"), ("probes_failed", "failed"), ("limit_warnings", "limit warnings logged")):
        if key in row:
            parts.append(f"{label} {row[key]}")
    return "; ".join(str(p) for p in parts) or "-"


def table(rows: list[dict]) -> str:
    lines = ["| case | fault | sent / ok / failed (client) | recovery | router RSS before -> after | mechanism (router counters) | invariants |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("skipped"):
            verdict = f"skipped: {r['skipped']}"
        elif r.get("error"):
            verdict = f"**error**: {r['error']}"
        else:
            verdict = "hold" if not r.get("violations") else "**" + "; ".join(r["violations"]) + "**"
        cells = [r["case"], r.get("fault", ""), client(r), recovery(r), memory(r), mechanism(r), verdict]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def block(rows: list[dict], header: str) -> str:
    return f"{BEGIN}\n{header}\n\n{table(rows)}\n{END}"


def replace_block(doc: str, new_block: str, section: str = "## Reliability (issue 12)") -> str:
    """Replaces the marked block; without one, appends it at the end of `section`."""
    if BEGIN in doc and END in doc:
        return re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _m: new_block, doc, count=1, flags=re.S)
    at = doc.find(section)
    if at < 0:
        raise ValueError(f"no section {section!r}")
    nxt = doc.find("\n## ", at + len(section))
    nxt = len(doc) if nxt < 0 else nxt + 1
    return doc[:nxt].rstrip("\n") + "\n\n" + new_block + "\n\n" + doc[nxt:]
