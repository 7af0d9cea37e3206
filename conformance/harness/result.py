"""One check's outcome."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

PASS, FAIL, SKIP, MISSING = "pass", "FAIL", "skip", "MISSING"


@dataclass
class Result:
    name: str
    status: str
    detail: str
    seconds: float = 0.0
    worker: str = ""
    steps: list = field(default_factory=list)

    @property
    def failed(self):
        return self.status in (FAIL, MISSING)


class Step:
    """Collects sub-steps of one check: ``s.check(ok, what)``; ``s.result()`` at the end."""

    def __init__(self, name, worker):
        self.name, self.worker = name, worker
        self.t0 = time.monotonic()
        self.steps = []
        self.status = PASS
        self.notes = []

    def check(self, ok, what, detail=""):
        self.steps.append((ok, what, detail))
        print(f"    [{'ok' if ok else 'FAIL'}] {self.name}: {what}" + (f" -- {detail}" if detail and not ok else ""), flush=True)
        if not ok and self.status == PASS:
            self.status = FAIL
        return ok

    def missing(self, what, detail):
        self.steps.append((False, what, detail))
        print(f"    [MISSING] {self.name}: {what} -- {detail}", flush=True)
        if self.status == PASS:
            self.status = MISSING

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)

    def result(self):
        bad = [f"{w}: {d}" if d else w for ok, w, d in self.steps if not ok]
        good = sum(1 for ok, _, _ in self.steps if ok)
        detail = f"{good}/{len(self.steps)} steps ok"
        if bad:
            detail += "; " + "; ".join(bad)
        if self.notes:
            detail += "; " + "; ".join(self.notes)
        return Result(self.name, self.status, detail, time.monotonic() - self.t0, self.worker,
                      self.steps)


def skipped(name, worker, why):
    print(f"    [skip] {name}: {why}", flush=True)
    return Result(name, SKIP, why, 0.0, worker)
