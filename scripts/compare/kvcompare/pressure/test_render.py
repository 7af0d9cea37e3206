"""Unit tests of the pressure report: markdown from a results dict, the docs block in place."""

import tempfile
import unittest
from pathlib import Path

from kvcompare import report
from kvcompare.pressure import render


def run(router, family, tm, hit):
    return {"timing_model": tm, "workload": "tenants", "capacity": "over", "case": "tenants-over", "router": router,
            "family": family, "workers": 8, "kv_tokens_per_worker": 16384, "fleet_kv_tokens": 131072,
            "working_set_tokens": 655360, "fleet": "8 x sglang-mock", "loadgen_args": ["tenants"],
            "summary": {"hit_rate": hit, "ttft_p99_ms": 100.0, "ok": 10, "errors": 0}}


class RenderTest(unittest.TestCase):
    def test_markdown_has_targets_per_timing_model_and_case_tables(self):
        res = {"meta": {"date": "d", "command": "python3 scripts/compare/compare.py pressure"},
               "runs": [run("kvrouter kv", "kvrouter", "poly", 0.6), run("smg cache_aware", "smg", "poly", 0.5),
                        run("kvrouter kv", "kvrouter", "roofline", 0.5),
                        run("smg cache_aware", "smg", "roofline", 0.52)]}
        md = render.markdown(res, None)
        line = next(ln for ln in md.splitlines() if ln.startswith("| hit rate >= best peer + 5 points"))
        self.assertIn("**met**", line.split("|")[3])      # poly: +10 points
        self.assertIn("**missed**", line.split("|")[4])   # roofline: -2 points
        self.assertTrue(line.rstrip().endswith("| no |"))
        self.assertIn("#### tenants, over (8 x 16 Ki, working set 5x the fleet's KV), timing model poly", md)

    def test_cases_without_rows_are_named(self):
        runs = [run("kvrouter kv", "kvrouter", "poly", 0.6)]
        missing = render.not_measured(runs)
        self.assertEqual(missing[1], "roofline: every case")
        self.assertIn("tenants fits", missing[0])
        self.assertNotIn("tenants over", missing[0])

    def test_docs_block_is_created_under_its_heading_then_replaced(self):
        with tempfile.TemporaryDirectory() as d:
            doc = Path(d) / "benchmarks.md"
            doc.write_text("# Benchmarks\n\n## Routing under pressure\n\nLead's prose.\n\n## Later\n")
            for body in ("first", "second"):
                report.update_benchmarks_md(doc, body, begin=render.BEGIN, end=render.END, heading=render.HEADING)
            text = doc.read_text()
        self.assertEqual(text.count(render.BEGIN), 1)
        self.assertIn(f"{render.BEGIN}\nsecond\n{render.END}", text)
        self.assertIn("Lead's prose.", text)
        self.assertLess(text.index("## Routing under pressure"), text.index(render.BEGIN))
        self.assertLess(text.index(render.END), text.index("## Later"))

    def test_merge_replaces_rows_of_the_same_case_router_and_timing_model(self):
        a = {"meta": {"command": "a"}, "runs": [run("kvrouter kv", "kvrouter", "poly", 0.1),
                                                 run("kvrouter kv", "kvrouter", "roofline", 0.2)]}
        b = {"meta": {"command": "b"}, "runs": [run("kvrouter kv", "kvrouter", "poly", 0.3)]}
        m = render.merge([a, b])
        hits = sorted((r["timing_model"], r["summary"]["hit_rate"]) for r in m["runs"])
        self.assertEqual(hits, [("poly", 0.3), ("roofline", 0.2)])


if __name__ == "__main__":
    unittest.main()
