"""Which partitions must stop being fetched so the oldest incomplete message can finish (sans-IO).

The assembler's capacity is shared by every partition a consumer reads, while a producer's size
limit is per message: two large messages of two partitions can together exceed what one message
may. Evicting one of them (LinkedIn's answer) loses it although both could be delivered one after
the other. A driver that can pause partitions (a group consumer) lets the assembler answer
"these partitions must wait" instead: it stops fetching them, reads them again from the offset
given once told to resume, and so nothing is lost and nothing is read twice as a message.

A partition that must wait gives up the chunks it holds (its incomplete messages stay known, without
bytes: their first segments still bound commits) and is read again from the first segment of the
oldest of them. The records between that offset and where the partition had got to were handled
already: when they come again only the segments of those messages are fed, the rest is passed over
(the *replay*). This module keeps that state and the decisions' results; the assembler makes them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from gateway.protocol.records import TopicPartitionKey

DEFAULT_STALL_TIMEOUT_S = 30.0
"""How long partitions wait for room while nothing at all can be fetched before the messages holding it go."""


@dataclass(frozen=True, slots=True)
class Wait:
    """``tp`` must not be fetched until resumed; then it is read again from ``resume_at``."""

    tp: TopicPartitionKey
    resume_at: int


@dataclass(slots=True)
class FlowState:
    """Partitions told to wait, partitions being read again, and what the driver has not been told yet."""

    waiting: dict[TopicPartitionKey, int] = field(default_factory=dict)
    """Partition -> the offset it is read again from once resumed."""
    replay: dict[TopicPartitionKey, int] = field(default_factory=dict)
    """Partition -> the offset it had reached: below it only the segments of its pending messages are fed."""
    seen: dict[TopicPartitionKey, int] = field(default_factory=dict)
    """Partition -> one past the last offset processed, for partitions with pending messages."""
    blocker: tuple[str, int, uuid.UUID] | None = None
    """The message the waiting partitions make room for: when it leaves the buffer, they resume."""
    waits: list[Wait] = field(default_factory=list)
    resumed: list[Wait] = field(default_factory=list)
    idle_since: float | None = None

    def wait(self, tp: TopicPartitionKey, resume_at: int, reached: int) -> None:
        """``tp`` stops; records of it below ``reached`` were handled and are only replayed."""
        at = min(resume_at, self.waiting.get(tp, resume_at))
        self.waiting[tp] = at
        if reached > at:
            self.replay[tp] = max(reached, self.replay.get(tp, reached))
        self.waits.append(Wait(tp, at))

    def resume_all(self) -> None:
        self.resumed.extend(Wait(tp, at) for tp, at in self.waiting.items())
        self.waiting.clear()
        self.blocker = None
        self.idle_since = None

    def replaying(self, tp: TopicPartitionKey, offset: int) -> bool:
        """Whether the record at ``offset`` of ``tp`` was handled before ``tp`` had to wait."""
        until = self.replay.get(tp)
        if until is None:
            return False
        if offset < until:
            return True
        del self.replay[tp]
        return False

    def note(self, tp: TopicPartitionKey, offset: int) -> None:
        if offset >= self.seen.get(tp, -1):
            self.seen[tp] = offset + 1

    def forget(self, tp: TopicPartitionKey | None = None) -> None:
        """A partition leaves (seek, revoke), or all do: nothing of it waits or replays any more."""
        if tp is None:
            self.waiting.clear()
            self.replay.clear()
            self.seen.clear()
            self.waits.clear()
            self.resumed.clear()
            self.blocker = None
            return
        self.waiting.pop(tp, None)
        self.replay.pop(tp, None)
        self.seen.pop(tp, None)
        self.waits = [w for w in self.waits if w.tp != tp]
        self.resumed = [w for w in self.resumed if w.tp != tp]
