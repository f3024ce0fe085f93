"""Store health for the policy layer: when to stop sending payloads to a failing store, and when to try again.

Sans-IO: every call takes the current time in milliseconds, so the rules can be tested without
clocks or servers. A store is *unhealthy* once ``failure_threshold`` failures fall within
``window_ms`` (or that many happen in a row); while unhealthy, the producer does not write to it,
except for one probe every ``probe_interval_ms``; a successful write makes it healthy again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum


class HealthState(str, Enum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


@dataclass
class StoreHealth:
    failure_threshold: int = 3
    window_ms: int = 30_000
    probe_interval_ms: int = 5_000
    state: HealthState = HealthState.HEALTHY
    unhealthy_since: int | None = None
    last_probe: int | None = None
    _failures: deque[int] = field(default_factory=deque)
    transitions: int = 0

    def allow(self, now_ms: int) -> bool:
        """Whether a write may go to the store now: always when healthy, one probe per interval otherwise."""
        if self.state is HealthState.HEALTHY:
            return True
        last = self.last_probe if self.last_probe is not None else self.unhealthy_since or now_ms
        if now_ms - last >= self.probe_interval_ms:
            self.last_probe = now_ms
            return True
        return False

    def success(self, now_ms: int) -> None:
        self._failures.clear()
        if self.state is not HealthState.HEALTHY:
            self.state = HealthState.HEALTHY
            self.unhealthy_since = None
            self.last_probe = None
            self.transitions += 1

    def failure(self, now_ms: int) -> None:
        self._failures.append(now_ms)
        while self._failures and now_ms - self._failures[0] > self.window_ms:
            self._failures.popleft()
        if self.state is HealthState.UNHEALTHY:
            self.last_probe = now_ms  # a failed probe: wait a full interval before the next
            return
        if len(self._failures) >= self.failure_threshold:
            self.state = HealthState.UNHEALTHY
            self.unhealthy_since = now_ms
            self.last_probe = now_ms
            self.transitions += 1

    @property
    def healthy(self) -> bool:
        return self.state is HealthState.HEALTHY
