"""Unit tests of the pressure suite's case shapes (issue 10's sizes; no processes)."""

import unittest
from pathlib import Path

from kvcompare.fleet import FleetSpec
from kvcompare.pressure import suite
from kvcompare.workloads import TRACE


def flag(argv, name):
    return argv[argv.index(name) + 1]


class SuiteTest(unittest.TestCase):
    def test_slow_workers_are_the_last_ones_and_the_reference_is_homogeneous(self):
        spec = FleetSpec(workers=4, speedup=10, slow_workers=1, slow_factor=2.5)
        self.assertEqual([spec.worker_speedup(i) for i in range(4)], [10, 10, 10, 4])
        self.assertIn("last 1 with --speedup 4", spec.describe())
        ref = spec.shared_cache()
        self.assertEqual((ref.workers, ref.slow_workers, ref.worker_speedup(0)), (1, 0, 40))
        self.assertEqual([FleetSpec(workers=2, speedup=5).worker_speedup(i) for i in range(2)], [5, 5])

    def test_every_workload_at_two_capacities_in_both_sizes(self):
        for size in ("quick", "full"):
            cases = suite.build(size, TRACE)
            self.assertEqual(sorted({c.key for c in cases}),
                             sorted(f"{w}-{c}" for w in suite.WORKLOADS for c in suite.CAPACITIES), size)
            for c in cases:
                for p in c.parts:  # loadgen reports in the fleet's simulated time
                    self.assertEqual(float(flag(p.argv, "--sim-speedup")), c.fleet.speedup, c.key)
            if size == "quick":
                self.assertTrue(all(c.fleet.workers == 2 for c in cases))

    def test_full_capacities_fit_or_are_4_to_10x_over(self):
        for c in suite.build("full", TRACE):
            ratio = c.working_set_tokens / c.fleet_kv_tokens()
            if c.workload == "trace":  # Dynamo's replay fleets, fixed by the issue
                self.assertEqual(c.fleet.workers, 8)
                self.assertIn(c.fleet.max_total_tokens, (256 * 1024, 1024 * 1024))
            elif c.capacity == "fits":
                self.assertLessEqual(ratio, 1.0, c.key)
            else:
                self.assertTrue(4.0 <= ratio <= 10.0, f"{c.key}: {ratio:.1f}x")

    def test_full_shapes_follow_the_issue(self):
        cases = {c.key: c for c in suite.build("full", TRACE)}
        roll = cases["grpo-fits"].parts[0].argv
        self.assertEqual(flag(roll, "--prompts"), "256")
        self.assertIn(int(flag(roll, "--samples")), range(8, 17))
        self.assertNotIn("--stream", roll)
        self.assertEqual(flag(roll, "--max-new-tokens"), "4096")
        ten = cases["tenants-over"].parts[0].argv
        self.assertIn(int(flag(ten, "--tenants")), range(64, 257))
        ag = cases["agent-over"].parts[0].argv
        self.assertEqual((flag(ag, "--sessions"), flag(ag, "--turns")), ("128", "20"))
        self.assertGreater(suite.AGENT_CONTEXT, 32 * 1024)
        self.assertEqual([p.name for p in cases["mix-over"].parts], ["rollout", "agent"])

    def test_tenants_rate_is_70_percent_of_the_lower_bound(self):
        prefill_bound = 1000.0 / suite.cold_prefill_ms(5376)
        # A large KV: the prefill bound decides.
        self.assertAlmostEqual(suite.tenants_rate(8, 1 << 30, 5376, 128), 0.7 * 8 * prefill_bound, places=0)
        # A small KV: fewer requests fit at once, the rate drops with it.
        small = suite.tenants_rate(8, 32 * 1024, 5376, 128)
        self.assertLess(small, suite.tenants_rate(8, 256 * 1024, 5376, 128))
        self.assertGreater(small, 0)

    @unittest.skipUnless(TRACE.exists(), "conversation trace not present")
    def test_trace_working_set_counts_distinct_blocks(self):
        self.assertEqual(suite.trace_unique_tokens(TRACE, 1), 14 * 512)
        self.assertEqual(suite.trace_unique_tokens(Path("/nonexistent"), 5), 0)


if __name__ == "__main__":
    unittest.main()
