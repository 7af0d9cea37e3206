"""The fault suite's sizes and loadgen command lines from the shared preset table
(workloads/presets.toml) against workloads/commands.json, as they were before the table (issue 27).
A deliberate change regenerates them: KVROUTER_UPDATE_COMMANDS=1 and this test."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "compare"))  # kvcompare, the comparison harness's package

from kvcompare import presets  # noqa: E402
from kvfaults import cases, rig  # noqa: E402


class _NoProc:
    def __init__(self, name, argv, log):
        pass


def generate() -> dict:
    out: dict = {}
    spawn, rig.Proc = rig.Proc, _NoProc  # build the command lines, start nothing
    try:
        o, b = Path("/OUT"), Path("/BIN/loadgen")
        for name, s in (("quick", cases.QUICK), ("full", cases.FULL)):
            out[f"faults/{name}/size"] = dataclasses.asdict(s)
            loads = {
                "load": rig.Load(b, "http://R", o, "tag", s.requests, s.wall_rate, s.speedup),
                "load-nostream-4": rig.Load(b, "http://R", o, "tag", s.requests, s.wall_rate, s.speedup,
                                            stream=False, max_new_tokens=4),
                "flood": rig.Load(b, "http://S", o, "flood-source", s.flood_requests, 1000, 1, stream=False,
                                  max_new_tokens=4, seed=7, tenants=s.flood_requests, system_len=(512, 2048)),
            }
            for k, ld in loads.items():
                out[f"faults/{name}/{k}"] = ld.argv
    finally:
        rig.Proc = spawn
    return out


class FaultPresetsTest(unittest.TestCase):
    def test_fault_sizes_and_command_lines_are_unchanged(self):
        new = json.loads(json.dumps(generate()))
        if os.environ.get("KVROUTER_UPDATE_COMMANDS") == "1":
            presets.update_commands(("faults/",), new)
        old = presets.commands(("faults/",))
        self.assertEqual(sorted(new), sorted(old))
        for k in old:
            self.assertEqual(presets.typed(new[k]), presets.typed(old[k]), k)


if __name__ == "__main__":
    unittest.main()
