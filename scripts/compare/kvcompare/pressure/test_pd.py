"""Unit tests of the PD cases: fleet roles and router flags, the targets and the report (synthetic
rows; no processes)."""

import unittest

from kvcompare import fleet
from kvcompare.pressure import pd


def row(router, family, prefill_hit=None, **summary):
    r = {"timing_model": "poly", "workload": summary.pop("wl", "grpo"), "case": summary.pop("case", "grpo-2p6d"),
         "router": router, "family": family, "summary": summary}
    if prefill_hit is not None:
        r["prefill_hit_rate"] = prefill_hit
    return r


def target(rows, text):
    return next(t for t in rows if t["target"].startswith(text))


class PdTest(unittest.TestCase):
    def test_fleet_roles_and_router_flags(self):
        spec = fleet.FleetSpec(workers=4, prefill=1)
        self.assertEqual([spec.role(i) for i in range(4)], ["prefill", "decode", "decode", "decode"])
        self.assertEqual(spec.shape(), "1p3d")
        self.assertEqual(spec.aggregated().role(0), None)
        self.assertEqual(spec.shared_cache().prefill, 0)
        fl = fleet.Fleet.__new__(fleet.Fleet)  # no processes: only the flag rendering
        fl.spec, fl.urls, fl.bootstrap_ports = spec, ["http://a", "http://b", "http://c", "http://d"], [9000, None,
                                                                                                        None, None]
        self.assertEqual(fl.router_args(), ["--pd-disaggregation", "--prefill", "http://a", "9000", "--decode",
                                            "http://b", "--decode", "http://c", "--decode", "http://d"])
        self.assertEqual(fl.indexes("prefill"), [0])
        self.assertEqual(fl.indexes("decode"), [1, 2, 3])

    def test_cases_cover_both_shapes_and_workloads(self):
        self.assertEqual([c.key for c in pd.build("full")],
                         ["grpo-2p6d", "grpo-4p4d", "grpo-2p6dr", "grpo-4p4dr",
                          "agent-2p6d", "agent-4p4d", "agent-2p6dr", "agent-4p4dr"])
        radix = [c for c in pd.build("full") if c.fleet.decode_radix]
        self.assertTrue(radix and all(c.key.endswith("r") for c in radix))
        self.assertTrue(all(c.fleet.prefill for c in pd.build("quick")))

    def test_targets_met_and_missed(self):
        rows = [row("kvrouter kv", "kvrouter", prefill_hit=0.86, hit_rate=0.5, ttft_p50_ms=60, ttft_p99_ms=900,
                    makespan_mean_s=70),
                row("sgl-router cache_aware", "sglr", ttft_p50_ms=100, ttft_p99_ms=1000, makespan_mean_s=80),
                row("smg cache_aware", "smg", ttft_p50_ms=120, ttft_p99_ms=1200, makespan_mean_s=90),
                row("reference: one shared cache", "reference", hit_rate=0.865)]
        t = pd.evaluate(rows)
        self.assertTrue(target(t, "prefill hit rate")["met"])        # 86.0% vs 86.5%: within a point
        self.assertTrue(target(t, "TTFT p50")["met"])                # 0.60x
        self.assertFalse(target(t, "TTFT p99")["met"])               # 0.90x where 0.70x was wanted
        self.assertIn("0.90x", target(t, "TTFT p99")["gap"])
        self.assertTrue(target(t, "makespan")["met"])                # 70 < 80
        md = pd.markdown({"meta": {}, "runs": rows})
        self.assertIn("| grpo-2p6d | poly | TTFT p99", md)
        self.assertIn("86.0%", md)

    def test_missing_rows_are_not_measured(self):
        t = pd.evaluate([row("kvrouter kv", "kvrouter", wl="agent", case="agent-4p4d", ttft_p50_ms=5)])
        self.assertIsNone(target(t, "TTFT p50")["met"])
        self.assertFalse(any(x["target"].startswith("prefill hit") for x in t))  # agent: no sibling target

    def test_a_decode_radix_case_is_held_to_its_plain_shapes_bound(self):
        rows = [row("reference: one shared cache", "reference", hit_rate=0.9),
                row("kvrouter kv", "kvrouter", prefill_hit=0.85, case="grpo-2p6dr", ttft_p50_ms=60,
                    ttft_p99_ms=900, makespan_mean_s=70)]
        md = pd.markdown({"meta": {}, "runs": rows})
        self.assertIn("| grpo-2p6dr | poly | prefill hit rate within 1 point of the shared-cache bound | "
                      "85.0% vs 90.0% | missed", md)


if __name__ == "__main__":
    unittest.main()
