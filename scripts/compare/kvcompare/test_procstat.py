"""procstat's host-stall counters (PSI memory "full" total, the OOM-kill count)."""

import tempfile
import unittest
from pathlib import Path

from kvcompare import procstat


class HostStallTest(unittest.TestCase):
    def files(self, pressure: str, vmstat: str) -> tuple[str, str]:
        d = Path(tempfile.mkdtemp())
        (d / "p").write_text(pressure)
        (d / "v").write_text(vmstat)
        return str(d / "p"), str(d / "v")

    def test_reads_full_total_and_oom_kills(self):
        p, v = self.files("some avg10=0.00 avg60=0.00 avg300=0.00 total=146700000\n"
                          "full avg10=0.00 avg60=0.00 avg300=0.00 total=136000000\n",
                          "pgfault 12\noom_kill 1\npgmajfault 3\n")
        self.assertEqual(procstat.host_stall(p, v), {"memory_full_s": 136.0, "oom_kills": 1})

    def test_missing_files_read_as_none(self):
        self.assertEqual(procstat.host_stall("/nonexistent/p", "/nonexistent/v"),
                         {"memory_full_s": None, "oom_kills": None})

    def test_a_stall_is_named_and_a_quiet_run_is_not(self):
        d = procstat.stall_delta({"memory_full_s": 10.0, "oom_kills": 0}, {"memory_full_s": 155.0, "oom_kills": 1})
        self.assertEqual(d, {"memory_full_s": 145.0, "oom_kills": 1})
        rec = {"host_memory_full_s": d["memory_full_s"], "host_oom_kills": d["oom_kills"]}
        self.assertIn("HOST STALLED", procstat.stall_warning(rec))
        self.assertEqual(procstat.stall_warning({"host_memory_full_s": 0.2, "host_oom_kills": 0}), "")
        self.assertEqual(procstat.stall_warning({}), "")
        self.assertEqual(procstat.stall_delta({"memory_full_s": None, "oom_kills": 0}, {"memory_full_s": 1.0,
                                                                                     "oom_kills": 0}),
                         {"memory_full_s": None, "oom_kills": 0})


if __name__ == "__main__":
    unittest.main()
