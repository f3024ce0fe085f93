"""``gateway demo``'s report: one table for every stage, the notes, and a verdict per stage."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gateway.testing.demo._model import DemoResult


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, int(q) - 1))]


@dataclass(frozen=True)
class TableRow:
    """A line another stage adds to the demo's table: a heading (label alone) or its figures."""

    label: str
    messages: int | None = None
    payload_bytes: int | None = None
    verified: str = ""


class Stage(Protocol):
    """A stage after the Kafka routes (the Spark stage): its rows join the table, its verdict the verdict."""

    @property
    def name(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def rows(self) -> Sequence[TableRow]: ...

    @property
    def notes(self) -> Sequence[str]: ...

    @property
    def ok(self) -> bool: ...

    def verdict(self) -> str: ...


def render(result: DemoResult, console: Any, stages: Sequence[Stage] = ()) -> bool:
    """The table, the notes and the verdict of every stage; True when every stage verified."""
    from rich.table import Table
    from rich.text import Text

    # Text, never markup: a backend such as [::1]:9092 or a store name must print as written
    title = ", ".join(
        [f"gateway demo on {result.backend}: Kafka routes {result.seconds:.1f} s"] + [s.title for s in stages]
    )
    table = Table(title=Text(title))
    for column in ("route", "messages", "payload bytes", "Kafka bytes", "store bytes", "p50 ms", "p99 ms", "verified"):
        table.add_column(column, justify="left" if column == "route" else "right")
    for name, stats in sorted(result.routes.items()):
        kind = name.split(":")[0]
        store = name.split(":")[1] if ":" in name else None
        table.add_row(
            Text(name),
            f"{stats.messages:,}",
            f"{stats.payload_bytes:,}",
            f"{result.kafka_bytes.get(name, result.kafka_bytes.get(kind, 0)):,}",
            f"{result.store_bytes.get(store, 0):,}" if store else "-",
            f"{percentile(stats.latencies_ms, 50):.1f}",
            f"{percentile(stats.latencies_ms, 99):.1f}",
            f"{stats.verified:,}/{stats.messages:,}",
        )
    for stage in stages:
        table.add_section()
        for row in stage.rows:
            figures = row.messages is not None
            table.add_row(
                Text(row.label, style="" if figures else "bold"),
                f"{row.messages:,}" if figures else "",
                f"{row.payload_bytes:,}" if row.payload_bytes is not None else "",
                *("", "", "", ""),
                row.verified,
            )
    console.print(table)
    for note in [*result.notes, *(n for s in stages for n in s.notes)]:
        console.print(Text("note: ", style="yellow") + Text(note), soft_wrap=True)
    verdict = "[green]every byte verified[/green]" if result.ok else "[red]VERIFICATION FAILED[/red]"
    console.print(
        f"{verdict}: {result.verified}/{result.produced} messages match by SHA-256"
        f" ({result.mismatched} mismatched, {result.missing} missing)"
    )
    for stage in stages:
        head = Text(f"{stage.name} verified", style="green") if stage.ok else Text(f"{stage.name} FAILED", style="red")
        console.print(head + Text(": " + stage.verdict()), soft_wrap=True)  # one line, as scripts grep it
    ok = result.ok and all(stage.ok for stage in stages)
    if stages:  # one line over every stage, as the exit status is
        names = ["Kafka routes", *(stage.name for stage in stages)]
        failed = [name for name, good in zip(names, [result.ok, *(s.ok for s in stages)], strict=True) if not good]
        outcome = Text("FAILED", style="red") if failed else Text("all verified", style="green")
        console.print(
            Text("verdict: ", style="bold") + outcome + Text(f" ({', '.join(failed or names)})"), soft_wrap=True
        )
    return ok
