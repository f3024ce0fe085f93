"""How far ``gateway gc``'s long work got, told to an observer the caller passes in.

A scan of a production topic can take up to ``--scan-timeout`` (ten minutes by default); an
operator watching a silent command cannot tell a slow read from a hang. The library reports
counts and leaves the showing (a live line, a log line every few seconds, nothing) to the caller,
so that library code never writes to a terminal it does not own. :class:`ProgressLine` is the
observer ``gateway gc`` and ``reconcile`` pass: stdout holds the report a script parses, so it writes
to stderr, a line that updates in place on a terminal (rich, from the ``cli`` extra) and a line
every few seconds otherwise, which a log keeps and a reader can tell from a hang.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass(frozen=True, slots=True)
class Progress:
    """One step of a phase: ``done`` of ``total`` units (records read, or pending writes acted on)."""

    phase: str
    """``scan`` (the ``read_uncommitted`` read), ``committed read``, or ``sweep``."""
    subject: str
    """The topic read, or ``pending writes`` for the sweep."""
    done: int
    total: int
    unit: str = "records"


ProgressObserver = Callable[[Progress], None]
"""Called often (after every fetched batch); an observer that prints must throttle itself."""


def ignore(progress: Progress) -> None:
    """The default observer: nobody is watching."""


class ProgressLine:
    """An observer that shows each :class:`Progress` as ``done of total (pct), rate`` on ``stream``.

    Plain lines come at most every ``every`` seconds (the first one ``every`` seconds after the
    start, so a short run prints none); the live line redraws at most ten times a second.
    """

    def __init__(
        self,
        prog: str,
        *,
        every: float = 2.0,
        stream: TextIO | None = None,
        live: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prog = prog
        self.every = every
        self.stream = sys.stderr if stream is None else stream
        self.clock = clock
        self._lock = threading.Lock()  # reconcile's Spark poller reports from its own thread
        self._phase: tuple[str, str] | None = None
        self._started = self._shown = clock()
        self._live = _live_display(self.stream) if (self.stream.isatty() if live is None else live) else None

    def __call__(self, progress: Progress) -> None:
        with self._lock:
            now = self.clock()
            if self._phase != (progress.phase, progress.subject):
                self._phase, self._started = (progress.phase, progress.subject), now
            if self._live is not None:
                if now - self._shown >= 0.1 or progress.done == progress.total:
                    self._shown = now
                    self._live.update(self.text(progress, now))
            elif now - self._shown >= self.every:
                self._shown = now
                print(self.text(progress, now), file=self.stream, flush=True)

    def text(self, progress: Progress, now: float) -> str:
        """``gateway gc: scan orders: 1200000 of 5000000 records (24%), 410000 records/s``."""
        elapsed = now - self._started
        rate = f", {progress.done / elapsed:.0f} {progress.unit}/s" if elapsed > 0 else ""
        share = f" ({100 * progress.done // progress.total}%)" if progress.total else ""
        counts = f"{progress.done} of {progress.total} {progress.unit}{share}"
        return f"{self.prog}: {progress.phase} {progress.subject}: {counts}{rate}"

    def close(self) -> None:
        """Take the live line off the terminal before the report is printed."""
        with self._lock:
            if self._live is not None:
                self._live.stop()
                self._live = None

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _live_display(stream: TextIO) -> Any:
    """A rich live line on ``stream``, or ``None`` (plain lines) when rich, the ``cli`` extra, is missing."""
    try:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text
    except ImportError:
        return None
    live = Live("", console=Console(file=stream), transient=True, auto_refresh=False)
    live.start()
    return _Redraw(live, Text)


class _Redraw:
    """rich's ``Live`` with an explicit refresh per update: no refresh thread racing the report."""

    def __init__(self, live: Any, plain: Callable[[str], Any]) -> None:
        self.live = live
        self.plain = plain  # rich.text.Text: the numbers as they are, not coloured as markup

    def update(self, text: str) -> None:
        self.live.update(self.plain(text), refresh=True)

    def stop(self) -> None:
        self.live.stop()


def watch_spark(spark: Any, show: Callable[[Progress], None], every: float) -> Callable[[], None]:
    """Report the active Spark stages' tasks every ``every`` seconds until the returned function is called.

    ``reconcile``'s work happens in Spark jobs the driver only waits for; their tasks are what moves.
    """
    stop = threading.Event()
    tracker = spark.sparkContext.statusTracker()

    def poll() -> None:
        while not stop.wait(max(every, 0.2)):
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    show(Progress("spark", f"stage {stage_id}", info.numCompletedTasks, info.numTasks, "tasks"))

    thread = threading.Thread(target=poll, name="gateway-progress", daemon=True)
    thread.start()

    def done() -> None:
        stop.set()
        thread.join(timeout=5)

    return done
