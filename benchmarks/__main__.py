"""Route benchmark: chunked, Redis and S3 references beside raw confluent-kafka, redis-py and boto3.

    python -m benchmarks [--quick] [--backend kafka|tansu|noida|external] [--output NAME|PATH.json]
    gateway bench  [same options]

Starts its own broker (Apache Kafka by default), redis-server and moto S3 server, measures every route
and its baselines (see benchmarks/variants.py), writes benchmarks/results/<name>.json and then
regenerates docs/benchmarks.md and its plots from it (python -m benchmarks.report).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from benchmarks.common import save
from benchmarks.suite import PlainUI, Plan, Suite


class RichUI:
    """A live progress bar with the current step, and finished result lines printed above it."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=False)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self.task = self.progress.add_task("starting", total=0)

    def __enter__(self) -> RichUI:
        self.progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.progress.stop()

    def add_steps(self, count: int) -> None:
        total = self.progress.tasks[0].total or 0
        self.progress.update(self.task, total=total + count)

    def step(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def advance(self) -> None:
        self.progress.advance(self.task)

    def note(self, text: str) -> None:
        self.progress.console.print(text, markup=False, highlight=False, soft_wrap=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``gateway bench`` shares with ``python -m benchmarks``."""
    parser.add_argument(
        "--quick", action="store_true", help="smaller volumes and no 100 MB size (about 2 minutes on 2 cores)"
    )
    parser.add_argument(
        "--backend",
        default="kafka",
        help="Kafka broker: kafka (Apache Kafka, the default; `make kafka` fetches it), tansu, noida, "
        "or external (KAFKA_BOOTSTRAP_SERVERS)",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="results name under benchmarks/results/ or a .json path (default routes-quick / routes-full)",
    )
    parser.add_argument("--docs", default=None, help="markdown report to regenerate (default docs/benchmarks.md)")
    parser.add_argument("--no-report", action="store_true", help="write the JSON only")
    parser.add_argument("--plain", action="store_true", help="no live display, print result lines only")


def run(args: argparse.Namespace) -> int:
    plan = Plan.quick() if args.quick else Plan.full()
    name = args.output or f"routes-{plan.mode}"
    started = time.perf_counter()
    ui: Any
    if args.plain or not sys.stdout.isatty():
        ui = PlainUI()
        results = Suite(plan, args.backend, ui).run()
    else:
        with RichUI() as ui:
            results = Suite(plan, args.backend, ui).run()
    results["name"] = Path(name).stem
    results["wall_seconds_measure"] = time.perf_counter() - started
    path = save(name, results)
    print(f"results: {path}")
    if plan.mode == "quick" and not args.docs:
        print("quick run: docs/benchmarks.md shows full mode and is left as it is (--docs PATH renders this run)")
    elif not args.no_report:
        from benchmarks import report

        argv = [str(path)]
        if args.docs:
            argv += ["--docs", args.docs]
        report.main(argv, total_started=started)
    print(f"wall time: {time.perf_counter() - started:.0f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
