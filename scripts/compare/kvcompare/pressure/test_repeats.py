"""Unit tests of the repeats table: medians and ranges per (model, case, router), ratios to the
baseline's medians, and a table results file that tables.py renders."""

import unittest

from kvcompare import tables
from kvcompare.pressure import repeats


def res(cmd, *runs):
    return {"meta": {"command": cmd}, "runs": [
        {"timing_model": "poly", "case": "tenants-fits", "router": r,
         "summary": {"hit_rate": h, "ttft_p50_ms": p50, "ttft_p99_ms": p99}} for r, h, p50, p99 in runs]}


class RepeatsTest(unittest.TestCase):
    def test_medians_ranges_and_ratios_to_the_baseline(self):
        results = [res("a", ("kv", 0.85, 40.0, 200.0), ("off", 0.86, 40.0, 100.0)),
                   res("b", ("kv", 0.87, 50.0, 300.0), ("off", 0.84, 20.0, 300.0)),
                   res("a", ("kv", 0.86, 45.0, 250.0), ("off", 0.85, 30.0, 200.0))]
        t = repeats.table(results, name="x", baseline="off", date="d", commit="c", conditions="")
        self.assertEqual(t["command"], ["a", "b"])
        kv, off = t["rows"]
        self.assertEqual(kv[:6], ["tenants-fits (poly)", "kv", "3", "86.0% (85.0%-87.0%)", "45 (40-50)",
                                  "250 (200-300)"])
        self.assertEqual(kv[6], "+1.0 points, p50 1.50x, p99 1.25x")
        self.assertEqual(off[6], "-")
        self.assertIn("| tenants-fits (poly) | kv | 3 |", tables.render(t))

    def test_runs_without_a_summary_are_left_out(self):
        r = res("a", ("kv", 0.5, 1.0, 2.0))
        r["runs"].append({"timing_model": "poly", "case": "tenants-fits", "router": "kv", "summary": None})
        self.assertEqual(len(repeats.collect([r])[("poly", "tenants-fits", "kv")]), 1)


if __name__ == "__main__":
    unittest.main()
