"""The shared preset table (workloads/presets.toml) against workloads/commands.json: every loadgen
command line (and fleet) that compare.py --size quick|demo|full, the pressure suite, its PD cases
and replicas.py build, as they were before the table (issue 27). A deliberate preset change
regenerates the file: KVROUTER_UPDATE_COMMANDS=1 and this test (then review the file's diff)."""

import dataclasses
import json
import os
import unittest
from pathlib import Path

from kvcompare import presets, workloads
from kvcompare.fleet import FleetSpec
from kvcompare.pressure import pd, suite

TRACE = Path("/nonexistent/trace.jsonl")  # a fixed path: working sets read from it are 0
PREFIXES = ("compare/", "pressure/", "pd/", "replicas/")


def generate() -> dict:
    fleet = dataclasses.asdict
    out: dict = {}
    for size in ("quick", "demo", "full"):
        for seed in (7, 3):
            out[f"compare/{size}/seed{seed}"] = [
                {"name": w.name, "fleet": fleet(w.fleet), "argv": w.argv, "timeout_s": w.timeout_s, "notes": w.notes}
                for w in workloads.build(size, TRACE, seed, "MODEL")]
    for size in ("quick", "full"):
        for seed in (7, 3):
            for tr in ((None, 0, 100) if size == "full" else (None,)):
                out[f"pressure/{size}/seed{seed}/trace_requests{tr}"] = [
                    {"key": c.key, "fleet": fleet(c.fleet), "parts": [dataclasses.asdict(p) for p in c.parts],
                     "timeout_s": c.timeout_s, "working_set_tokens": c.working_set_tokens, "notes": c.notes}
                    for c in suite.build(size, TRACE, seed, tr)]
            out[f"pd/{size}/seed{seed}"] = [
                {"key": c.key, "fleet": fleet(c.fleet), "parts": [dataclasses.asdict(p) for p in c.parts],
                 "timeout_s": c.timeout_s} for c in pd.build(size, seed)]
    out["pressure/AGENT_CONTEXT"] = suite.AGENT_CONTEXT
    out["replicas/default"] = presets.replicas_argv()
    r = presets.suite("replicas", "fleet")
    out["replicas/fleet"] = {"workers": r["workers"], "page_size": FleetSpec().page_size, "speedup": r["speedup"],
                             "max_total_tokens": r["max_total_tokens"]}
    return out


class PresetsTest(unittest.TestCase):
    def test_harness_command_lines_are_unchanged(self):
        new = json.loads(json.dumps(generate()))
        if os.environ.get("KVROUTER_UPDATE_COMMANDS") == "1":
            presets.update_commands(PREFIXES, new)
        old = presets.commands(PREFIXES)
        self.assertEqual(sorted(new), sorted(old))
        for k in old:
            self.assertEqual(presets.typed(new[k]), presets.typed(old[k]), k)

    def test_every_preset_fills_and_every_reference_names_a_preset(self):
        names = set(presets.table()["preset"])
        for name in names:
            p = presets.preset(name)
            self.assertIn(p["workload"], ("grpo", "agent", "rollout", "tenants", "trace"), name)
            values = {k: "X" for k in ("trace", "max_requests", "rate", "requests", "url", "speedup", "json",
                                       "records")}
            self.assertTrue(all("{" not in a for a in presets.argv(name, **values)), name)
        refs = []

        def walk(x):
            if isinstance(x, dict):
                for k, v in x.items():
                    if k in ("preset", "agent", "grpo") and isinstance(v, str):
                        refs.append(v)
                    walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)
        walk({k: v for k, v in presets.table().items() if k != "preset"})
        self.assertTrue(refs)
        self.assertEqual(sorted(set(refs) - names), [])

    def test_an_unfilled_argument_is_an_error(self):
        with self.assertRaises(KeyError):
            presets.argv("trace-quick")
        self.assertEqual(presets.flag("pressure-agent", "--concurrency", sessions=64), "64")


if __name__ == "__main__":
    unittest.main()
