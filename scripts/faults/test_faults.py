"""Unit tests of the fault suite's parsing and rendering (no processes started)."""

from __future__ import annotations

import json
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "compare"))  # kvcompare, the comparison harness's package

from kvcompare import prom  # noqa: E402
from kvfaults import records, report  # noqa: E402

METRICS = """# HELP kvrouter_retries_total x
# TYPE kvrouter_retries_total counter
kvrouter_retries_total{route="/generate",reason="connect"} 2
kvrouter_retries_total{route="/v1/completions",reason="connect"} 1
kvrouter_retries_total{route="/generate",reason="stalled"} 4
kvrouter_worker_restarts_total 3
kvrouter_worker_healthy{worker="http://127.0.0.1:1"} 0
garbage line
"""


def rec(start_ms, e2e_ms, status="ok", http=200, worker="w1", finish="length", error=None):
    return {"start_ms": start_ms, "e2e_ms": e2e_ms, "status": status, "http_status": http, "worker": worker,
            "finish_reason": finish if status == "ok" else None, "error": error}


class PromTest(unittest.TestCase):
    def test_labels_are_kept_and_summed_by_match(self):
        s = prom.parse(METRICS)
        self.assertEqual(prom.total(s, "kvrouter_retries_total"), 7)
        self.assertEqual(prom.total(s, "kvrouter_retries_total", reason="connect"), 3)
        self.assertEqual(prom.by_label(s, "kvrouter_retries_total", "reason"), {"connect": 3, "stalled": 4})
        self.assertEqual(prom.total(s, "kvrouter_worker_restarts_total"), 3)

    def test_delta_drops_unchanged_series(self):
        before = prom.parse('kvrouter_retries_total{reason="connect"} 2\nkvrouter_retries_total{reason="stalled"} 1')
        after = prom.parse('kvrouter_retries_total{reason="connect"} 2\nkvrouter_retries_total{reason="stalled"} 5')
        self.assertEqual(prom.delta(before, after, "kvrouter_retries_total", "reason"), {"stalled": 4})
        # A counter without the label is keyed "" (shown as one number).
        self.assertEqual(prom.delta({}, prom.parse("x_total 2"), "x_total", ""), {"": 2})


class RecordsTest(unittest.TestCase):
    def test_counts_and_cuts(self):
        recs = [rec(0, 400), rec(100, 50, "failed", 200, error="the worker connection broke mid-stream"),
                rec(200, 10, "failed", None, error="transport: tcp connect error: Connection refused"),
                rec(300, 10, "failed", 503, error="HTTP 503"), rec(0, 0, "cancelled", None)]
        s = records.summarize(recs, speedup=1.0)
        self.assertEqual((s["sent"], s["ok"], s["failed"], s["cancelled"]), (5, 1, 3, 1))
        self.assertEqual(s["failed_after_head"], 1)
        self.assertEqual(s["failed_no_response"], 1)
        self.assertEqual(s["failed_http_status"], {"503": 1})
        self.assertEqual(s["error_kinds"]["connection refused"], 1)
        bad = records.invariant_violations(s, expect_sent=5)
        self.assertTrue(any("cancelled" in b or "gave up" in b for b in bad))

    def test_times_around_a_fault_use_the_speedup(self):
        # speedup 4: sim ms / 4 = wall ms. Fault at wall 1.0 s.
        recs = [rec(2000, 4000),                        # wall 0.5 .. 1.5: in flight, ok
                rec(3000, 2000, "failed", 200, "w2"),   # wall 0.75 .. 1.25: in flight, cut
                rec(4800, 800),                         # wall 1.2 .. 1.4: first ok after the fault
                rec(6000, 400, worker="w2")]            # wall 1.5 .. 1.6
        s = records.summarize(recs, 4.0, fault_s=1.0, worker="w2")
        self.assertEqual(s["in_flight_at_fault"], 2)
        self.assertEqual(s["in_flight_ok"], 1)
        self.assertEqual(s["in_flight_failed_after_head"], 1)
        self.assertAlmostEqual(s["first_ok_after_s"], 0.4)
        self.assertAlmostEqual(s["last_failure_after_s"], 0.25)
        self.assertEqual(s["worker_requests"], 2)
        self.assertAlmostEqual(s["worker_first_ok_after_s"], 0.6)

    def test_an_ok_without_finish_reason_is_a_silent_truncation(self):
        s = records.summarize([rec(0, 1), dict(rec(0, 1), finish_reason=None)], 1.0)
        self.assertEqual(s["ok_without_finish"], 1)
        self.assertTrue(any("truncation" in b for b in records.invariant_violations(s)))
        clean = records.summarize([rec(0, 1)], 1.0)
        self.assertEqual(records.invariant_violations(clean, expect_sent=1), [])

    def test_load_skips_broken_lines(self):
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "r.jsonl"
            p.write_text(json.dumps(rec(0, 1)) + "\n{broken\n[1]\n")
            self.assertEqual(len(records.load(p)), 1)
            self.assertEqual(records.load(Path(d) / "missing"), [])


ROW = {"case": "worker killed", "fault": "SIGKILL", "rss_before_mb": 21.2, "rss_after_mb": 23.0,
       "unhealthy_after_s": 0.17, "all_healthy_after_s": 3.0,
       "client": {"sent": 60, "ok": 59, "failed": 1, "failed_after_head": 1, "failed_no_response": 0,
                  "failed_http_status": {}, "in_flight_at_fault": 2, "in_flight_ok": 1,
                  "first_ok_after_s": 0.12, "last_failure_after_s": 0.02},
       "counters": {"retries_total": {"connect": 1.0}, "worker_restarts_total": {"": 1.0},
                    "requests_total": {"200": 59.0}},
       "violations": []}


class ReportTest(unittest.TestCase):
    def test_table_row(self):
        t = report.table([ROW, dict(ROW, case="bad", violations=["router died"]),
                          {"case": "nats", "skipped": "no nats-server"}])
        lines = t.splitlines()
        self.assertEqual(len(lines), 5)
        self.assertIn("60 / 59 / 1 (1 cut after head; 2 in flight at the fault, 1 of them ok)", lines[2])
        self.assertIn("marked unhealthy 0.17 s; all healthy 3 s; first ok 0.12 s", lines[2])
        self.assertIn("21 MB -> 23 MB", lines[2])
        self.assertIn("retries connect=1; worker_restarts 1", lines[2])
        self.assertNotIn("requests", lines[2])
        self.assertTrue(lines[2].endswith("| hold |"))
        self.assertIn("**router died**", lines[3])
        self.assertIn("skipped: no nats-server", lines[4])

    def test_replace_block_appends_then_replaces(self):
        doc = "# B\n\n## Reliability (issue 12)\n\nkept table\n\n## Next\n\nrest\n"
        once = report.replace_block(doc, report.block([ROW], "hdr one"))
        self.assertIn("kept table\n\n" + report.BEGIN + "\nhdr one", once)
        self.assertLess(once.index(report.END), once.index("## Next"))
        twice = report.replace_block(once, report.block([ROW], "hdr two"))
        self.assertEqual(twice.count(report.BEGIN), 1)
        self.assertIn("hdr two", twice)
        self.assertNotIn("hdr one", twice)
        self.assertTrue(twice.endswith("## Next\n\nrest\n"))
        with self.assertRaises(ValueError):
            report.replace_block("# no section\n", "x")


if __name__ == "__main__":
    unittest.main()
