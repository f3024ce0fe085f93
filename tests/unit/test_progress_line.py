"""What ``gateway gc`` and ``reconcile`` print as progress: counts and rate, every few seconds when not a terminal."""

from __future__ import annotations

import io

from gateway.gc.progress import Progress, ProgressLine


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_come_every_interval_with_counts_and_rate() -> None:
    clock, out = Clock(), io.StringIO()
    line = ProgressLine("gateway gc", every=2.0, stream=out, live=False, clock=clock)
    line(Progress("scan", "orders", 0, 5_000_000))  # the read starts: nothing yet, a short run prints nothing
    clock.now += 1.0
    line(Progress("scan", "orders", 400_000, 5_000_000))
    assert out.getvalue() == ""
    clock.now += 1.0
    line(Progress("scan", "orders", 820_000, 5_000_000))
    clock.now += 0.5
    line(Progress("scan", "orders", 1_000_000, 5_000_000))  # within the interval: not shown
    assert out.getvalue().splitlines() == ["gateway gc: scan orders: 820000 of 5000000 records (16%), 410000 records/s"]


def test_the_rate_restarts_with_each_phase() -> None:
    clock, out = Clock(), io.StringIO()
    line = ProgressLine("gateway gc", every=0.0, stream=out, live=False, clock=clock)
    line(Progress("scan", "orders", 0, 100))
    clock.now += 10
    line(Progress("sweep", "pending writes", 0, 4, "writes"))
    clock.now += 2
    line(Progress("sweep", "pending writes", 4, 4, "writes"))
    assert out.getvalue().splitlines()[-1] == "gateway gc: sweep pending writes: 4 of 4 writes (100%), 2 writes/s"


def test_an_empty_read_shows_no_percentage() -> None:
    line = ProgressLine("gateway gc", stream=io.StringIO(), live=False, clock=Clock())
    assert line.text(Progress("scan", "t", 0, 0), 100.0) == "gateway gc: scan t: 0 of 0 records"


def test_the_live_line_on_a_terminal_is_gone_before_the_report() -> None:
    """rich draws on the terminal and takes its line off again, so the report that follows stands alone."""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    clock, out = Clock(), Terminal()
    with ProgressLine("gateway gc", stream=out, clock=clock) as line:
        clock.now += 1
        line(Progress("scan", "orders", 50, 100))
        assert "50 of 100 records (50%)" in out.getvalue()
    assert line._live is None
