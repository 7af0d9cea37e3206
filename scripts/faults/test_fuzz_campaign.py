"""Unit tests of the fuzz campaign's stats parsing and seed encoding (no fuzzer run)."""

from __future__ import annotations

import json
import unittest

import fuzz_campaign
from kvfaults.msgpack import pack

LOG = """INFO: Seed: 1234
#2	INITED cov: 100 ft: 120 corp: 9/1Kb exec/s: 0 rss: 40Mb
#4096	pulse  cov: 300 ft: 800 corp: 120/8Kb lim: 4096 exec/s: 2048 rss: 60Mb
#812345	DONE   cov: 812 ft: 2301 corp: 410/21Kb lim: 4096 exec/s: 4115 rss: 80Mb
Done 812345 runs in 601 second(s)
"""


class StatsTest(unittest.TestCase):
    def test_the_last_status_line_wins(self):
        s = fuzz_campaign.parse_stats(LOG)
        self.assertEqual((s["executions"], s["coverage"], s["features"]), (812345, 812, 2301))
        self.assertEqual((s["corpus_units"], s["corpus_size"], s["exec_per_s"], s["rss_mb"]), (410, "21Kb", 4115, 80))
        self.assertFalse(s["crash"])
        self.assertIn("| `t` | 600 | 812,345 | 4115 | 812 / 2301 | 410 (21Kb) | none |", fuzz_campaign.row("t", 600, s))

    def test_a_panic_is_a_finding(self):
        s = fuzz_campaign.parse_stats(LOG + "thread '<unnamed>' panicked at src/x.rs:1:1\n==42== ERROR: libFuzzer: deadly signal\n")
        self.assertTrue(s["crash"])
        self.assertIn("crash", fuzz_campaign.row("t", 1, s))
        self.assertEqual(fuzz_campaign.parse_stats("nothing"), {"crash": False})


class MsgpackTest(unittest.TestCase):
    def test_known_encodings(self):
        self.assertEqual(pack(None), b"\xc0")
        self.assertEqual(pack(5), b"\x05")
        self.assertEqual(pack(-5), b"\xfb")
        self.assertEqual(pack(300), b"\xce\x00\x00\x01\x2c")
        self.assertEqual(pack(-300), b"\xd3" + (-300).to_bytes(8, "big", signed=True))
        self.assertEqual(pack(1.0), b"\xcb\x3f\xf0" + b"\x00" * 6)
        self.assertEqual(pack("GPU"), b"\xa3GPU")
        self.assertEqual(pack(b"\x01\x02"), b"\xc4\x02\x01\x02")
        self.assertEqual(pack([1, [2]]), b"\x92\x01\x91\x02")
        self.assertEqual(pack({"a": True}), b"\x81\xa1a\xc3")
        self.assertEqual(pack(list(range(16)))[:3], b"\xdc\x00\x10")

    def test_every_target_has_seeds(self):
        for t in fuzz_campaign.TARGETS:
            self.assertTrue(fuzz_campaign.seeds(t))
        for body in fuzz_campaign.seeds("parse_request"):
            self.assertIsInstance(json.loads(body), dict)


if __name__ == "__main__":
    unittest.main()
