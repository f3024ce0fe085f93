"""Warnings that repeat (an outage, an expiry storm) kept to a few lines, with a count of the rest.

Shared by the consumer (dropped messages, skipped records, foreign commit metadata) and the producer
(every fallback of a store that is down, taken or refused), so both keep one rule: at most one line
per kind per interval, and the next line says how many like it were left out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any


class RateLimitedLog:
    """At most one line per ``interval_s`` per kind; the lines left out are counted and summed up.

    An expiry storm (thousands of incomplete messages) then costs a few log lines, and
    ``suppressed`` (the client's ``warnings.suppressed`` metric) says how many were left out.
    """

    def __init__(
        self, logger: logging.Logger, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._log = logger
        self._interval = interval_s
        self._clock = clock
        self._next: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self.suppressed = 0

    def warning(self, kind: str, message: str, *args: Any) -> None:
        now = self._clock()
        if now < self._next.get(kind, float("-inf")):
            self._held[kind] = self._held.get(kind, 0) + 1
            self.suppressed += 1
            return
        self._next[kind] = now + self._interval
        held = self._held.pop(kind, 0)
        if held:
            message += " (and %d more like it since the last such line)"
            args = (*args, held)
        self._log.warning(message, *args)
