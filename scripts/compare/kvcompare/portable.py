"""Machine-local paths out of what the harness records and publishes: every string of a results
file (commands, binaries, loadgen arguments, quoted router log lines) is rewritten to a form a
reader can type in their own checkout (`target/...`, `$TRACE`), both when a run writes its
results and when a report renders a results file into docs/."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent.parent

# Prefixes a docs test refuses (scripts/compare/test_docs.py); nothing rendered may keep one.
LOCAL_PREFIXES = ("/work/", "/root/", "/home/", "/tmp/")

# Paths of this run that have a portable name (registered by the run: the trace it replayed).
_registered: dict[str, str] = {}

# Older results files were recorded on the project's build machine: its venvs, its copy of the
# Mooncake trace, scratch output under /tmp, and peer log lines with a CI runner's checkout path.
_LEGACY = [
    (re.compile(r"/home/runner/work/[^/\s]+/[^/\s]+/"), ""),  # GitHub Actions checkout (peer source paths)
    (re.compile(r"[^\s\"'`]*/shared/traces/conversation_trace\.jsonl"), "$TRACE"),
    (re.compile(r"/work/venvs/"), "target/compare-venvs/"),
    (re.compile(r"/tmp/"), "target/"),
    # Both peers' venvs side by side under one root say what `--venv-root` says.
    (re.compile(r"--sglr-venv (\S+)/sglr --smg-venv \1/smg(?=\s|$)"), r"--venv-root \1"),
]


def register(path: str | Path, name: str) -> None:
    """Records that `path` (as given and resolved) is written `name` in published results."""
    for p in {str(path), str(Path(path).resolve())}:
        if p and p != name:
            _registered[p] = name


def _dynamic() -> list[tuple[str, str]]:
    """This machine's own spellings, longest first: registered paths, the repository, the cargo
    target dir, the home directory."""
    pairs = dict(_registered)
    target = os.environ.get("CARGO_TARGET_DIR")
    if target and Path(target).is_absolute():
        pairs.setdefault(str(Path(target)) + "/", "target/")
    pairs.setdefault(str(REPO) + "/", "")
    home = os.environ.get("HOME")
    if home and home not in ("/", "") and Path(home).is_absolute():
        pairs.setdefault(home.rstrip("/") + "/", "~/")
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


def text(s: str) -> str:
    """`s` with every known machine-local path replaced by its portable spelling."""
    for local, name in _dynamic():
        s = s.replace(local, name)
    for pat, name in _LEGACY:
        s = pat.sub(name, s)
    return s


def tree(obj):
    """A copy of a JSON value (dicts, lists, strings, numbers) with every string through `text`."""
    if isinstance(obj, str):
        return text(obj)
    if isinstance(obj, dict):
        return {k: tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [tree(v) for v in obj]
    if isinstance(obj, tuple):
        return [tree(v) for v in obj]
    return obj


def local_paths(s: str) -> list[str]:
    """The machine-local paths left in `s` (empty when it is portable)."""
    pat = re.compile(r"(?<![\w.~$-])(?:" + "|".join(re.escape(p) for p in LOCAL_PREFIXES) + r")[^\s\"'`)\]]*")
    return pat.findall(s)
