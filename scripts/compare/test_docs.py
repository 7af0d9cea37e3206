"""Docs a user can trust: no machine-local path in any tracked doc or results file, the generated
blocks of docs/benchmarks.md and README.md equal to what their generators render from the
committed results files, and the path rewriting the harness applies to what it records."""

from __future__ import annotations

import subprocess
import unittest
from pathlib import Path

import readme_figures
from kvcompare import portable, report
from kvcompare.pressure import render as pressure_render

REPO = Path(__file__).resolve().parent.parent.parent
RESULTS = REPO / "docs" / "results"


def tracked_docs() -> list[Path]:
    """Every tracked Markdown file, the results files, and the files users read in config/ and deploy/."""
    r = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "*.md", "docs/results", "config", "deploy"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise unittest.SkipTest(f"not a git checkout: {r.stderr.strip()}")
    return [REPO / p for p in r.stdout.split("\0") if p and (REPO / p).is_file()]


def block(text: str, begin: str, end: str) -> str:
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


class NoMachineLocalPaths(unittest.TestCase):
    def test_tracked_docs_hold_no_machine_local_path(self):
        found = []
        for p in tracked_docs():
            try:
                text = p.read_text()
            except UnicodeDecodeError:
                continue  # images
            for n, line in enumerate(text.splitlines(), 1):
                for hit in portable.local_paths(line):
                    found.append(f"{p.relative_to(REPO)}:{n}: {hit}")
        self.assertEqual(found, [], "machine-local paths in docs (write target/..., $TRACE, ...):\n"
                         + "\n".join(found[:40]))


class GeneratedBlocksMatchResults(unittest.TestCase):
    """Each generated block is what its generator renders from docs/results/ today."""

    def test_pressure_block(self):
        res = pressure_render.merge([report.load(RESULTS / "pressure-full.json")])
        doc = (REPO / "docs" / "benchmarks.md").read_text()
        self.assertEqual(block(doc, pressure_render.BEGIN, pressure_render.END),
                         pressure_render.markdown(res, "img").rstrip(),
                         "run: python3 scripts/compare/compare.py pressure-report docs/results/pressure-full.json "
                         "--update-docs")

    def test_side_by_side_block(self):
        res = report.merge([report.load(RESULTS / "compare-full.json"), report.load(RESULTS / "compare-overhead.json")])
        doc = (REPO / "docs" / "benchmarks.md").read_text()
        self.assertEqual(block(doc, report.BEGIN, report.END), report.markdown(res, "img").rstrip(),
                         "run: python3 scripts/compare/compare.py report docs/results/compare-full.json "
                         "docs/results/compare-overhead.json --update-docs")

    def test_readme_figures(self):
        now = (REPO / "README.md").read_text()
        self.assertEqual(now, readme_figures.render(now), "run: python3 scripts/compare/readme_figures.py")


class PortableRewrite(unittest.TestCase):
    def test_build_machine_spellings(self):
        cmd = ("python3 scripts/compare/compare.py --bin-dir /tmp/bins-main --sglr-venv /work/venvs/sglr "
               "--smg-venv /work/venvs/smg --trace /work/shared/traces/conversation_trace.jsonl --out /tmp/x")
        self.assertEqual(portable.text(cmd), "python3 scripts/compare/compare.py --bin-dir target/bins-main "
                         "--venv-root target/compare-venvs --trace $TRACE --out target/x")

    def test_repository_and_registered_paths(self):
        portable.register("/data/elsewhere/my-trace.jsonl", "$TRACE")
        s = f"--bin-dir {portable.REPO}/target/release --file /data/elsewhere/my-trace.jsonl"
        self.assertEqual(portable.text(s), "--bin-dir target/release --file $TRACE")

    def test_peer_log_quote_loses_the_ci_checkout(self):
        line = "ERROR smg::routers::http::router: /home/runner/work/sglang/sglang/src/routers/http/router.rs:563: x"
        self.assertEqual(portable.text(line), "ERROR smg::routers::http::router: src/routers/http/router.rs:563: x")

    def test_idempotent_and_tree(self):
        obj = {"a": ["/tmp/a", {"b": "/work/venvs/smg"}], "n": 1, "t": (1.0, 2.0)}
        once = portable.tree(obj)
        self.assertEqual(once, {"a": ["target/a", {"b": "target/compare-venvs/smg"}], "n": 1, "t": [1.0, 2.0]})
        self.assertEqual(portable.tree(once), once)

    def test_local_paths_finds_only_absolute_ones(self):
        self.assertEqual(portable.local_paths("see /work/x and target/tmp/y and ~/z"), ["/work/x"])


if __name__ == "__main__":
    unittest.main()
