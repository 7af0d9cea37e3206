"""Unit tests of reading loadgen's output: summary keys, records digest, combined parts."""

import json
import tempfile
import unittest
from pathlib import Path

from kvcompare import workloads


class WorkloadsTest(unittest.TestCase):
    def test_summarize_reads_makespans(self):
        raw = {"requests": {"total": 4, "ok": 4}, "prefix_hit_rate": 0.5,
               "makespan_secs": {"mean": 2.0, "max": 3.0, "total": 4.0},
               "batches": [{"makespan_secs": 1.0, "requests": 2}, {"makespan_secs": 3.0, "requests": 2}]}
        s = workloads.summarize(raw)
        self.assertEqual((s["makespan_mean_s"], s["makespan_max_s"], s["batch_makespans_s"]), (2.0, 3.0, [1.0, 3.0]))

    def test_records_digest_keeps_ok_requests_only(self):
        lines = [{"status": "ok", "ok": True, "e2e_ms": float(i), "ttft_ms": 1.0} for i in range(1, 101)]
        lines.append({"status": "failed", "ok": False, "e2e_ms": 1e9})
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "r.jsonl"
            p.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
            dg = workloads.records_digest(p)
        self.assertEqual(dg["records"], 101)
        q = dg["e2e_quantiles_ms"]
        self.assertEqual((len(q), q[0], q[-1]), (101, 1.0, 100.0))

    def test_combine_sums_tokens_and_takes_latency_and_makespan_from_their_parts(self):
        roll = {"requests": 10, "ok": 10, "prompt_tokens": 1000, "cached_tokens": 500, "ttft_p99_ms": 9.0,
                "makespan_mean_s": 5.0}
        agent = {"requests": 5, "ok": 5, "prompt_tokens": 1000, "cached_tokens": 900, "ttft_p99_ms": 1.0}
        c = workloads.combine({"rollout": roll, "agent": agent}, latency_part="agent", makespan_part="rollout")
        self.assertEqual((c["requests"], c["ok"]), (15, 15))
        self.assertAlmostEqual(c["hit_rate"], 0.7)
        self.assertEqual((c["ttft_p99_ms"], c["makespan_mean_s"]), (1.0, 5.0))


if __name__ == "__main__":
    unittest.main()
