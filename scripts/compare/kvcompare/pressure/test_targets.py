"""Unit tests of the targets evaluation (synthetic rows; no processes)."""

import unittest

from kvcompare.pressure import targets


def row(router, family, **summary):
    return {"timing_model": "poly", "workload": summary.pop("wl", "trace"), "capacity": summary.pop("cap", "over"),
            "router": router, "family": family, "summary": summary}


def by_id(rows, tid, **match):
    return [r for r in rows if r["id"] == tid and all(r[k] == v for k, v in match.items())]


class TargetsTest(unittest.TestCase):
    def test_trace_targets_met_and_missed_with_gaps(self):
        runs = [row("kvrouter kv", "kvrouter", hit_rate=0.088, ttft_p50_ms=100, ttft_p99_ms=900),
                row("kvrouter round-robin", "kvrouter", hit_rate=0.05, ttft_p50_ms=90, ttft_p99_ms=1000),
                row("sgl-router cache_aware", "sglr", hit_rate=0.06, ttft_p99_ms=800),
                row("smg cache_aware", "smg", hit_rate=0.02, ttft_p99_ms=700),
                row("reference: one shared cache", "reference", hit_rate=0.089, ttft_p50_ms=80)]
        rows = targets.evaluate(runs)
        bound = by_id(rows, "trace-bound")[0]
        self.assertTrue(bound["met"])  # 0.088 / 0.089 = 98.9%
        peer = by_id(rows, "trace-peer")[0]
        self.assertFalse(peer["met"])  # 8.8% - 6.0% = 2.8 points, 5 wanted
        self.assertEqual(peer["gap"], "2.2 points short; the target (11.0%) is above the shared-cache "
                                      "reference (8.9%): at most +2.9 points are reachable")
        self.assertIn("sgl-router cache_aware", peer["measured"])
        self.assertTrue(by_id(rows, "trace-ttft50")[0]["met"])  # 100 / 80 = 1.25x <= 1.5x
        self.assertTrue(by_id(rows, "trace-ttft99")[0]["met"])  # 900 / 1000 ms
        # Each trace target appears once per case (trace-peer only at the over-capacity fleet).
        self.assertEqual(len(by_id(rows, "trace-bound", capacity="over")), 1)

    def test_peer_margin_and_missing_rows(self):
        runs = [row("kvrouter kv", "kvrouter", hit_rate=0.30, ttft_p99_ms=500, wl="tenants"),
                row("smg cache_aware", "smg", hit_rate=0.27, ttft_p99_ms=600, wl="tenants")]
        rows = targets.evaluate(runs)
        hit = by_id(rows, "tenants-hit")[0]
        self.assertFalse(hit["met"])
        self.assertEqual(hit["gap"], "2.0 points short")
        ttft = by_id(rows, "ttft99-peer")[0]
        self.assertFalse(ttft["met"])  # 500 / 600 = 0.83 > 0.7
        rr = by_id(rows, "ttft99-rr")[0]
        self.assertIsNone(rr["met"])  # no round-robin row
        self.assertIn("round-robin", rr["gap"])

    def test_a_peer_margin_beyond_the_shared_cache_reference_says_so(self):
        runs = [row("kvrouter kv", "kvrouter", hit_rate=0.844, wl="tenants", cap="fits"),
                row("sgl-router cache_aware", "sglr", hit_rate=0.835, wl="tenants", cap="fits"),
                row("reference: one shared cache", "reference", hit_rate=0.882, wl="tenants", cap="fits")]
        hit = by_id(targets.evaluate(runs), "tenants-hit")[0]
        self.assertFalse(hit["met"])
        self.assertEqual(hit["gap"], "4.1 points short; the target (88.5%) is above the shared-cache "
                                     "reference (88.2%): at most +4.7 points are reachable")

    def test_failed_rows_do_not_count_and_mix_reads_its_parts(self):
        def mix(router, family, rollout, agent):
            return {"timing_model": "roofline", "workload": "mix", "capacity": "fits", "router": router,
                    "family": family, "summary": {},
                    "parts": {"rollout": {"summary": rollout}, "agent": {"summary": agent}}}
        runs = [mix("kvrouter kv", "kvrouter", {"makespan_mean_s": 80.0, "hit_rate": 0.5}, {"hit_rate": 0.7}),
                mix("kvrouter round-robin", "kvrouter", {"makespan_mean_s": 100.0}, {"hit_rate": 0.4}),
                {**mix("smg cache_aware", "smg", {"makespan_mean_s": 1.0}, {"hit_rate": 0.9}), "error": "boom"},
                mix("sgl-router cache_aware", "sglr", {"makespan_mean_s": 90.0, "hit_rate": 0.52},
                    {"hit_rate": 0.6})]
        rows = targets.evaluate(runs)
        self.assertTrue(by_id(rows, "grpo-makespan-rr")[0]["met"])      # 0.8x round-robin
        self.assertTrue(by_id(rows, "grpo-makespan-peer")[0]["met"])    # the failed SMG row is ignored
        grpo_hit = by_id(rows, "grpo-hit")[0]                            # 50% vs 52%: outside 1 point
        self.assertFalse(grpo_hit["met"])
        self.assertEqual(grpo_hit["gap"], "1.0 points short")
        self.assertEqual(by_id(rows, "agent-hit")[0]["part"], "agent")
        self.assertTrue(by_id(rows, "agent-hit")[0]["met"])

    def test_balance_reads_the_kv_row(self):
        runs = [{**row("kvrouter kv", "kvrouter", hit_rate=0.5, wl="agent"), "balance_max_over_mean": 1.42}]
        b = by_id(targets.evaluate(runs), "balance")[0]
        self.assertFalse(b["met"])
        self.assertEqual(b["gap"], "0.12x over 1.3x")


if __name__ == "__main__":
    unittest.main()
