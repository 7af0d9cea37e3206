"""Docs a user can trust: no machine-local path in any tracked doc or results file, every
repository path the docs name exists, the generated blocks of docs/benchmarks.md and README.md
equal to what their generators render from the committed results files, and the path rewriting
the harness applies to what it records."""

from __future__ import annotations

import json
import os
import re
import subprocess
import unittest
from pathlib import Path

import docs as docs_gen
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


def git_ls_files() -> list[str]:
    r = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, text=True)
    if r.returncode != 0:
        raise unittest.SkipTest(f"not a git checkout: {r.stderr.strip()}")
    return [p for p in r.stdout.split("\0") if p]


# Docs name paths relative to the repository, to a crate (`src/routing/kv/book.rs`,
# `tests/kv/dp.rs`), to a crate's `src/` (`routing/kv/runtime.rs`, `index/`), to the simulator's
# mock and loadgen modules (docs/mock.md, docs/loadgen.md) or to a harness package
# (`kvcompare/report.py`, `kvfaults/attacks.py`). A path is found when it exists under any of them.
EXTRA_ROOTS = ("crates/sim/src/mock", "crates/sim/src/loadgen", "crates/kvrouter/src/routing",
               "scripts/compare", "scripts/faults")
# Paths of other projects that the docs quote by their own names (SMG's and SGLang's sources,
# which share a first folder with ours): never repository paths.
FOREIGN = ("src/routers/", "src/middleware.rs", "src/metrics.rs", "src/observability/", "src/core/",
           "python/sglang/", "src/lib.rs (SMG", "docs/getting-started/", "docs/reference/", "deploy/helm/")
# Docs checked: the README and the top-level docs. docs/history/ records paths that were removed on
# purpose, and docs/results/ holds generated pages.
CHECKED_DOCS = ("README.md", "python/README.md", "docs/*.md")

# Stale paths in docs this branch may not edit (docs/kv-routing.md is being rewritten elsewhere):
# tolerated until fixed there, and the test fails once one of them is fixed so the entry goes.
PENDING: set[tuple[str, str]] = set()

_SPAN = re.compile(r"`([^`\n]+)`")
_PLAIN = re.compile(r"(?<![\w/`(.\-])((?:crates|docs|scripts|config|deploy)/[A-Za-z0-9_.\-/]*[A-Za-z0-9_/])")
_MIME = re.compile(r"(?:text|application|image|multipart)/[a-z0-9.+\-]+")
_OWN_FILE = re.compile(r"[A-Za-z0-9_]+\.rs")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_TOKEN = re.compile(r"[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*/?")


def path_roots(files: list[str]) -> list[str]:
    crates = sorted({str(Path(f).parent) for f in files if f.endswith("/Cargo.toml")})
    return ["", *crates, *(c + "/src" for c in crates), *EXTRA_ROOTS]


def path_candidates(line: str, in_fence: bool) -> list[tuple[str, bool]]:
    """(text, is_link) of what may be a path on one line: each word of an inline code span (the
    whole line in a fenced block) and each Markdown link target."""
    words = line.split() if in_fence else [w for m in _SPAN.finditer(line) for w in m.group(1).split()]
    out = [(w, False) for w in words]
    if not in_fence:
        out += [(m.group(1), True) for m in _LINK.finditer(line)]
        prose = _SPAN.sub(" ", _LINK.sub(" ", line))
        out += [(m.group(1), False) for m in _PLAIN.finditer(prose)]
    return out


def normalise(word: str) -> str | None:
    """The path in `word`, or None when it is not one: URLs, anchors, placeholders, globs,
    absolute or machine paths, scratch output under target/, `--flag=value` keeps the value."""
    w = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
    w = w.strip(".,;:()\"'")
    if "://" in w or w.startswith(("#", "mailto:")):
        return None
    w = re.sub(r"#.*$", "", w)
    w = re.sub(r":\d+(-\d+)?$", "", w)
    if not w or not _TOKEN.fullmatch(w) or "..." in w:
        return None
    if w.startswith(("target/", "../", "./", ".bench-venv", "/")) or _MIME.fullmatch(w):
        return None
    return w


def missing_doc_paths() -> list[str]:
    files = git_ls_files()
    tracked = set(files)
    dirs = {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}
    roots = path_roots(files)
    # The first folders a path can start with: the folders directly under each root.
    heads = {d[len(r) + 1:] if r else d for r in roots for d in dirs
             if (d.startswith(r + "/") if r else True) and "/" not in (d[len(r) + 1:] if r else d)}

    def found(p: str) -> bool:
        p = p.rstrip("/")
        return any((f"{r}/{p}" if r else p) in tracked or (f"{r}/{p}" if r else p) in dirs for r in roots)

    docs = [p for p in files if any(Path(p).match(pat) and p.count("/") == pat.count("/") for pat in CHECKED_DOCS)]
    basenames = {f.rsplit("/", 1)[-1] for f in files}
    missing = []
    for doc in docs:
        fence = False
        for n, line in enumerate((REPO / doc).read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                fence = not fence
                continue
            for word, is_link in path_candidates(line, fence):
                p = normalise(word)
                if p is None or p.startswith(FOREIGN):
                    continue
                if is_link:
                    full = os.path.normpath(str(Path(doc).parent / p))
                    if full not in tracked and full not in dirs:
                        missing.append(f"{doc}:{n}: {p} (link)")
                    continue
                if "/" not in p:
                    # A Rust file named alone (`score.rs` in a folder's table) is ours: it must
                    # exist somewhere; other file names alone may be another project's.
                    if _OWN_FILE.fullmatch(p) and p not in basenames and (doc, p) not in PENDING:
                        missing.append(f"{doc}:{n}: {p} (no file of that name)")
                    continue
                if p.split("/", 1)[0] not in heads:
                    continue  # a path of another project (`mem_cache/radix_cache.py`)
                if not found(p) and (doc, p) not in PENDING:
                    missing.append(f"{doc}:{n}: {p}")
    return missing


def still_pending() -> set[tuple[str, str]]:
    """The PENDING entries whose path is still named somewhere in their doc without existing."""
    files = git_ls_files()
    basenames = {f.rsplit("/", 1)[-1] for f in files}
    left = set()
    for doc, p in PENDING:
        text = (REPO / doc).read_text() if (REPO / doc).exists() else ""
        if f"`{p}`" in text and p.rsplit("/", 1)[-1] not in basenames | set(files):
            left.add((doc, p))
    return left


class DocPathsExist(unittest.TestCase):
    """Every repository path that README.md and docs/*.md name (in code, in commands, in links)
    exists in the checkout; a moved file fails here naming each doc and line that still points
    to the old place."""

    def test_named_paths_exist(self):
        missing = missing_doc_paths()
        self.assertEqual(missing, [], "paths named in docs that do not exist (update them to where the code "
                         "lives now, or add another project's path to FOREIGN in scripts/compare/test_docs.py):\n"
                         + "\n".join(missing))

    def test_pending_entries_are_still_stale(self):
        self.assertEqual(still_pending(), PENDING, "a PENDING path was fixed in its doc: remove it from PENDING")

    def test_candidates_skip_what_is_not_a_path(self):
        for word in ("https://github.com/sgl-project/sglang", "kvcache-ai/Mooncake", "target/release",
                     "$TRACE", "*.md", "<dir>", "--bin-dir", "../shared/traces/x.jsonl", "/proc/1/stat",
                     "kvrouter_kv_{predicted,actual}_hit_tokens_total", "text/event-stream", "application/json"):
            p = normalise(word)
            self.assertTrue(p is None or "/" not in p or p.split("/", 1)[0] in ("kvcache-ai",), word)
        self.assertEqual(normalise("--out=docs/results/x.json"), "docs/results/x.json")
        self.assertEqual(normalise("crates/kvrouter/src/lib.rs:42"), "crates/kvrouter/src/lib.rs")


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

    def test_every_block_is_rendered_from_docs_results(self):
        """Every generated block of docs/benchmarks.md (the table blocks of kind "table", the
        fault suite, the decision scale, and the harness reports above) as docs.py renders it."""
        doc = (REPO / "docs" / "benchmarks.md").read_text()
        names = docs_gen.block_names(doc)
        self.assertGreater(len(names), 10)
        for name in names:
            with self.subTest(block=name):
                begin = next(m for m in docs_gen._BLOCK.finditer(doc) if m.group(1) == name)
                body = doc[begin.end():].split(f"<!-- {name}:end -->", 1)[0].strip("\n")
                self.assertEqual(body, docs_gen.render_block(name), "run: python3 scripts/compare/docs.py")

    def test_every_table_is_in_a_block(self):
        """No hand-typed table in docs/benchmarks.md: each table sits inside a generated block."""
        doc = (REPO / "docs" / "benchmarks.md").read_text()
        outside, depth, fence = [], None, False
        for n, line in enumerate(doc.splitlines(), 1):
            if line.startswith("```"):
                fence = not fence
            m = docs_gen._BLOCK.match(line)
            if m:
                depth = m.group(1)
            elif depth and line.startswith(f"<!-- {depth}:end -->"):
                depth = None
            elif not fence and depth is None and line.startswith("|---"):
                outside.append(f"docs/benchmarks.md:{n - 1}")
        self.assertEqual(outside, [], "tables outside a generated block (put their figures in docs/results/ "
                         "and the table between markers; scripts/compare/kvcompare/tables.py):\n" + "\n".join(outside))

    def test_table_results_are_stamped(self):
        for path in sorted(RESULTS.glob("*.json")):
            res = json.loads(path.read_text())
            if res.get("kind") != "table":
                continue
            with self.subTest(results=path.name):
                for key in ("command", "commit", "date", "columns", "rows"):
                    self.assertTrue(res.get(key), f"{path.name}: no {key}")
                self.assertEqual(res.get("name"), path.stem)

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
