"""What the consumer pipeline reports beside messages: messages dropped, and partitions that wait for room.

The assembler decides both (:mod:`gateway.core.assembler`, :mod:`gateway.core.flow`); this turns what it
decided into :class:`~gateway.core.events.MessageDropped` and :class:`~gateway.core.events.FlowChange`
events, passes over the records a waiting partition reads again, and gives up the messages that partitions
wait for once nothing at all can be fetched. It is the pipeline's part that reads a clock the driver passes
in, apart from the record path.
"""

from __future__ import annotations

from gateway.core.assembler import MessageAssembler
from gateway.core.commits import CommitTranslator
from gateway.core.events import Event, FlowChange, MessageDropped
from gateway.errors import InvalidSegmentError, LargeMessageDroppedError
from gateway.protocol.classify import classify
from gateway.protocol.records import Record, TopicPartitionKey


class DropsAndWaits:
    """Drops and flow changes of one :class:`~gateway.core.pipeline.ConsumerPipeline`, counted in its ``counters``.

    ``hold_drops=True`` keeps commits of a partition at the first segment of a message evicted from it, so a
    restart reads it again; ``stall_timeout_s`` is how long partitions may wait while nothing can be fetched.
    """

    __slots__ = ("_assembler", "_commits", "_counters", "_flow", "_hold_drops", "_stall_s")

    def __init__(
        self,
        assembler: MessageAssembler,
        commits: CommitTranslator,
        counters: dict[str, int],
        *,
        hold_drops: bool,
        stall_timeout_s: float,
    ) -> None:
        self._assembler = assembler
        self._commits = commits
        self._counters = counters
        self._flow = assembler.flow
        self._hold_drops = hold_drops
        self._stall_s = stall_timeout_s

    def drain(
        self, tp: TopicPartitionKey | None, record: Record | None, exc: LargeMessageDroppedError | None
    ) -> list[Event]:
        """Drops, then the partitions that must wait or may go on; a held drop keeps commits before it."""
        dropped = self._assembler.dropped
        flow = self._flow
        if not dropped and not flow.waits and not flow.resumed:
            return []
        events: list[Event] = []
        counters = self._counters
        for info in dropped:
            key = f"dropped.{info.reason}"
            counters[key] = counters.get(key, 0) + 1
            if self._hold_drops and info.reason == "evicted":  # read again after a restart, never skipped
                self._commits.hold((info.topic, info.partition), info.starting_offset)
            if record is None and not events and self._assembler.exception_on_message_dropped:  # gave up (idle)
                exc = LargeMessageDroppedError(f"large message dropped while partitions waited for room: {info}", info)
            safe = None if tp is None else self._commits.safe_offset(tp)
            events.append(MessageDropped(record, info, exc if not events else None, safe))
        dropped.clear()
        events.extend(self.flow_changes())
        return events

    def replayed(self, tp: TopicPartitionKey, record: Record) -> bool:
        """A record of a partition that waits, or one handled before and read again: nothing to do."""
        try:
            segment = classify(record.value, record.headers, record.offset).segment
        except InvalidSegmentError:
            segment = None  # reported when first read
        if not self._assembler.replayed(tp, record.offset, segment):
            return False
        self._counters["flow.replayed"] = self._counters.get("flow.replayed", 0) + 1
        return True

    @property
    def waiting(self) -> bool:
        flow = self._flow
        return bool(flow.waiting or flow.waits or flow.resumed)

    def flow_changes(self) -> list[Event]:
        flow = self._flow
        if not flow.waits and not flow.resumed:
            return []
        change = FlowChange(tuple(flow.waits), tuple(flow.resumed))
        self._counters["flow.waits"] = self._counters.get("flow.waits", 0) + len(change.waits)
        flow.waits.clear()
        flow.resumed.clear()
        return [change]

    def fetched(self) -> None:
        self._flow.idle_since = None

    def idle(self, now: float) -> list[Event]:
        flow = self._flow
        if not flow.waiting:
            flow.idle_since = None
            return self.flow_changes()
        if flow.idle_since is None:
            flow.idle_since = now
            return self.flow_changes()
        if now - flow.idle_since < self._stall_s:
            return self.flow_changes()
        self._assembler.give_up_waiting()
        return self.drain(None, None, None)
