"""The producer's one source of time, passed in so that the code which reads it can be tested without waiting.

Two readings, each where it belongs: wall-clock milliseconds for what leaves the process (record
timestamps, pending marks, store health windows shared with other processes' notion of time) and a
monotonic reading for durations and deadlines, which must not jump when the wall clock is set.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Clock:
    wall: Callable[[], float] = time.time
    """Seconds since the epoch (``time.time``)."""
    monotonic: Callable[[], float] = time.monotonic
    """Seconds from an arbitrary origin that never goes back (``time.monotonic``)."""

    def wall_ms(self) -> int:
        return int(self.wall() * 1000)


SYSTEM_CLOCK = Clock()
