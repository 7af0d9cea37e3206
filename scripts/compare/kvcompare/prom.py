"""Prometheus text parsing with labels kept: the compare harness sums each metric over its
labels (`by_name`); the fault suite needs `kvrouter_retries_total{reason="stalled"}` apart from
`{reason="connect"}`."""

from __future__ import annotations

import re

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Series:
    """`{(name, sorted label pairs): value}` for every sample line; malformed lines are skipped."""
    out: Series = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            head, value = line.rsplit(None, 1)
            v = float(value)
        except ValueError:
            continue
        if "{" in head:
            name, _, rest = head.partition("{")
            labels = tuple(sorted(_LABEL.findall(rest.rstrip("}"))))
        else:
            name, labels = head, ()
        out[(name.strip(), labels)] = v
    return out


def by_name(series: Series) -> dict[str, float]:
    """Every metric summed over its labels: `{name: value}`."""
    out: dict[str, float] = {}
    for (name, _), v in series.items():
        out[name] = out.get(name, 0.0) + v
    return out


def total(series: Series, name: str, **match: str) -> float:
    """Sum of `name` over the series whose labels include every `match` pair."""
    s = 0.0
    for (n, labels), v in series.items():
        if n != name:
            continue
        d = dict(labels)
        if all(d.get(k) == val for k, val in match.items()):
            s += v
    return s


def by_label(series: Series, name: str, label: str) -> dict[str, float]:
    """`name` summed per value of `label` (e.g. retries per reason); zero entries dropped."""
    out: dict[str, float] = {}
    for (n, labels), v in series.items():
        if n == name:
            key = dict(labels).get(label, "")
            out[key] = out.get(key, 0.0) + v
    return {k: v for k, v in out.items() if v}


def delta(before: Series, after: Series, name: str, label: str) -> dict[str, float]:
    """Per-`label` increase of counter `name` between two scrapes (zero entries dropped)."""
    b, a = by_label(before, name, label), by_label(after, name, label)
    out = {k: a.get(k, 0.0) - b.get(k, 0.0) for k in set(a) | set(b)}
    return {k: v for k, v in sorted(out.items()) if v}
