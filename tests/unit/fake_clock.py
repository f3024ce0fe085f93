"""A clock the test moves by hand."""

from __future__ import annotations

from gateway.clock import Clock


class ManualClock:
    def __init__(self, wall: float = 1_700_000_000.0, monotonic: float = 100.0) -> None:
        self.wall = wall
        self.monotonic = monotonic
        self.reads = 0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.monotonic += seconds

    def clock(self) -> Clock:
        def wall() -> float:
            self.reads += 1
            return self.wall

        def monotonic() -> float:
            self.reads += 1
            return self.monotonic

        return Clock(wall=wall, monotonic=monotonic)
