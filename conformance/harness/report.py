"""Writes docs/results/conformance/<version>.md: one table row per check and worker, with
the commit, date, command and run time."""

from __future__ import annotations

import datetime
import os
import subprocess


def _git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True,
                              cwd=os.path.dirname(__file__), timeout=10).stdout.strip()
    except Exception:
        return "?"


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def portable(text):
    """The page without machine-local paths: the repository root dropped, another
    checkout's or venv's path shortened to ``<checkout>/...`` from its ``target/``."""
    import re

    text = text.replace(ROOT + "/conformance/../", "").replace(ROOT + "/", "")
    text = re.sub(r"/(?:work|root|home|tmp)/\S*?/target/", "<checkout>/target/", text)
    return re.sub(r"/(?:work|root|home|tmp)/[^\s`)]*", "<local path>", text)


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _bin(path):
    try:
        t = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc)
        return f"`{path}` (built {t.strftime('%Y-%m-%d %H:%M UTC')})"
    except OSError:
        return f"`{path}` (missing)"


def write(results_dir, S, results, secs, cmd, args, native_why, env=None):
    os.makedirs(results_dir, exist_ok=True)
    suffix = "-quick" if args.quick else ""
    if args.only:
        suffix += "-" + args.only.replace(",", "-")
    path = os.path.join(results_dir, f"{S.version}{suffix}.md")
    commit = _git("rev-parse", "--short=12", "HEAD")
    dirty = " (uncommitted changes)" if _git("status", "--porcelain", "--", ".") else ""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    failed = sum(1 for r in results if r.failed)
    lines = [
        f"# Conformance results: SGLang {S.version}" + (" (quick)" if args.quick else ""),
        "",
        "Written by `conformance/run.py`; see docs/conformance.md for what each check does.",
        "",
        f"- commit: `{commit}`{dirty}",
        f"- date: {now}",
        f"- command: `{cmd}`",
        f"- run time: {secs:.0f} s",
        f"- SGLang: `sglang=={S.version}` (installed with `--no-deps`, conformance/requirements/{S.version}.txt)",
        f"- native page hash: {S.native_hash}" + (f" ({native_why})" if native_why else ""),
        f"- router: {_bin(env.router_bin)}" if env else "- router: ?",
        f"- sglang-mock: {_bin(env.mock_bin)}" + (f", flags {' '.join(env.mock_flags)}" if env and env.mock_flags else "") if env else "- sglang-mock: ?",
        f"- outcome: {len(results) - failed} passed, {failed} failed",
        "",
    ]
    if S.missing:
        lines += ["Objects this SGLang version does not have (checks that need them are skipped "
                  "or adapted):", ""]
        lines += [f"- `{k}`: {v}" for k, v in S.missing.items()]
        lines.append("")
    lines += ["| check | worker | result | time (s) | detail |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.name} | {r.worker} | {r.status} | {r.seconds:.1f} | {_cell(r.detail)} |")
    lines.append("")
    for r in results:
        if not r.steps:
            continue
        lines += [f"## {r.name} ({r.worker})", ""]
        for ok, what, detail in r.steps:
            mark = "ok" if ok else "**failed**"
            lines.append(f"- {mark}: {_cell(what)}" + (f" ({_cell(detail)[:400]})" if detail and not ok else ""))
        lines.append("")
    with open(path, "w") as f:
        f.write(portable("\n".join(lines)) + "\n")
    return path
