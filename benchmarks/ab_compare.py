"""The verdict of an A/B run (``gateway bench --against REF``): pure arithmetic on the repetitions' samples.

A figure measured alone says nothing about a change: on a shared machine one run moves by 30 %
between repetitions. So both sides are measured alternately on the same broker, and a change is
only called one when a side's median leaves the other side's whole min-max range; anything inside
it is what the machine does anyway. The ratio is reported with the spread of the pair-wise ratios
(the tree's repetition ``i`` over the ref's repetition ``i``, measured seconds apart), since the
two medians' ratio alone hides how much the pairs disagreed.

Nothing here runs a benchmark: :mod:`benchmarks.ab` collects the samples, this module judges them.
It imports nothing from ``gateway``: :mod:`benchmarks.ab_child` imports it on the ref's side too,
where ``gateway`` is the ref's, which may lack any name added since.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

TREE, REF = "tree", "ref"
"""The two sides: the working tree (what is being changed) and the git ref it is judged against."""


@dataclass(frozen=True, slots=True)
class Spread:
    """A side's repetitions of one entry: median and min-max."""

    median: float
    low: float
    high: float
    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        if not samples:
            raise ValueError("a spread needs at least one sample")
        values = tuple(float(v) for v in samples)
        return cls(statistics.median(values), min(values), max(values), values)

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True, slots=True)
class Entry:
    """What one suite measures under one name, and which way is better."""

    name: str
    unit: str
    higher_is_better: bool = True


@dataclass(frozen=True, slots=True)
class Row:
    """One entry judged: both sides, the ratio tree / ref with the spread of the pairs' ratios, the verdict."""

    entry: Entry
    tree: Spread
    ref: Spread
    ratio: float
    """tree median / ref median."""
    pair_ratios: Spread
    """tree repetition i / ref repetition i, over the pairs."""
    flagged: bool
    """A median lies outside the other side's min-max."""
    verdict: str
    """``better``, ``worse`` or ``same`` (within the spreads), from the tree's point of view."""


def judge(entry: Entry, tree: Sequence[float], ref: Sequence[float]) -> Row:
    """Compare one entry's samples; both sides need the same number of repetitions (they ran in pairs)."""
    if len(tree) != len(ref):
        raise ValueError(f"{entry.name}: {len(tree)} tree repetitions against {len(ref)} of the ref")
    a, b = Spread.of(tree), Spread.of(ref)
    ratio = a.median / b.median if b.median else float("nan")
    pairs = Spread.of([x / y if y else float("nan") for x, y in zip(tree, ref, strict=True)])
    flagged = not b.holds(a.median) or not a.holds(b.median)
    verdict = "same"
    if flagged:
        up = a.median > b.median
        verdict = "better" if up == entry.higher_is_better else "worse"
    return Row(entry, a, b, ratio, pairs, flagged, verdict)


def judge_all(entries: Sequence[Entry], samples: Mapping[str, Mapping[str, Sequence[float]]]) -> list[Row]:
    """``samples[side][entry name]``: every entry either side measured, in the suite's order."""
    return [judge(e, samples[TREE][e.name], samples[REF][e.name]) for e in entries]


def any_flagged(rows: Sequence[Row]) -> bool:
    return any(row.flagged for row in rows)


def _figure(x: float) -> str:
    if x != x:  # NaN
        return "n/a"
    if abs(x) >= 10_000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def _spread(s: Spread) -> str:
    return f"{_figure(s.median)} ({_figure(s.low)}-{_figure(s.high)})"


def _ratio(s: Spread, median: float) -> str:
    return f"{median:.2f} ({s.low:.2f}-{s.high:.2f})"


TABLE_HEADER = ("entry", "tree: median (min-max)", "ref: median (min-max)", "tree / ref (pairs min-max)", "flag")


def table_rows(rows: Sequence[Row]) -> list[list[str]]:
    """The A/B table's cells, the same on stdout and on the benchmarks page."""
    out = []
    for row in rows:
        flag = f"**{row.verdict}**" if row.flagged else ""
        name = f"{row.entry.name} ({row.entry.unit})"
        out.append([name, _spread(row.tree), _spread(row.ref), _ratio(row.pair_ratios, row.ratio), flag])
    return out


def markdown_table(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    lines.extend("| " + " | ".join(cells) + " |" for cells in table_rows(rows))
    return "\n".join(lines)


def as_json(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [asdict(row) for row in rows]


def from_json(raw: Sequence[Mapping[str, Any]]) -> list[Row]:
    """Rows as :func:`as_json` wrote them (the page re-renders a committed results file)."""

    def spread(d: Mapping[str, Any]) -> Spread:
        return Spread(float(d["median"]), float(d["low"]), float(d["high"]), tuple(d["samples"]))

    return [
        Row(
            Entry(**r["entry"]),
            spread(r["tree"]),
            spread(r["ref"]),
            float(r["ratio"]),
            spread(r["pair_ratios"]),
            bool(r["flagged"]),
            str(r["verdict"]),
        )
        for r in raw
    ]
