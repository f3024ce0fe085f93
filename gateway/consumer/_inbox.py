"""The consumer's inbox: the one owner of its librdkafka consumer and of the raw records fetched from it.

Every call into librdkafka's ``Consumer`` is made here (fetching, membership, seeks, positions,
pauses, metadata); the rest of the consumer asks the inbox. Records wait here until ``poll`` hands
one to the pipeline, so a message counts as delivered (and becomes committable) only when the
application receives it. Each fetched batch is scanned once for envelopes, whose payloads start
downloading while the queue drains.

A fetched batch proven plain (:class:`~gateway.core.plain_deliveries.ProvenBatch`) is handed out by
count alone: the pipeline opens it and notes what was counted out itself, before it answers
anything about offsets and before a partition's state changes; the inbox only counts ``left``
down, and closes the batch before anything else is taken or the queue itself changes. No caller
has to remember, and the core never asks the inbox.

Whole messages a call delivered but did not return wait for the next call in :class:`KeptMessages`,
with the commits they hold back; the inbox owns it and takes the steps, so that the order of taking
stays decided here.

What is fetched is also steered here: :class:`FlowControl` pauses the partitions that must wait
for room in the assembler, seeks them back and resumes them (:mod:`gateway.core.flow`).
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate, islice
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.core.commits import CommitFloors
from gateway.core.events import Event, FlowChange
from gateway.core.flow import Wait
from gateway.core.inbox_states import TABLE, InboxState, Step, next_state, out_of_order
from gateway.core.offsets import Progress
from gateway.core.pipeline import ConsumerPipeline
from gateway.core.plain_deliveries import CLOSED, ProvenBatch
from gateway.core.plain_runs import drop_head, take_plain_batch, take_plain_run
from gateway.protocol.classify import is_plainly_plain
from gateway.protocol.records import TopicPartitionKey

log = logging.getLogger(__name__)


def fit(records: Iterable[Any], room: int, *, first: bool = False) -> list[int]:
    """The running byte totals of the ``records`` from the head that fit in ``room`` bytes; one at least when
    ``first``. A record's ``len`` is its value's, and the totals are summed in C: no Python step per record."""
    sizes = list(accumulate(map(len, records)))
    n = bisect_right(sizes, room)
    del sizes[max(n, 1 if first else 0) :]
    return sizes


def partition_of(msg: Any) -> TopicPartitionKey:
    return (msg.topic(), msg.partition())


def drop_partition(records: deque[Any], key: TopicPartitionKey) -> None:
    """``key``'s records leave ``records`` in place (the deque is never replaced: its readers hold on to it)."""
    stay = [m for m in records if partition_of(m) != key]
    records.clear()
    records.extend(stay)


class ConsumerCalls:
    """librdkafka's consumer, and every call to it but fetching: membership, positions, pauses, metadata.

    The :class:`Inbox` adds what is fetched and what waits (one owner of the client, in one module); this
    part only passes calls through, answered as confluent-kafka answers them.
    """

    __slots__ = ("_consumer", "batch", "batch_bytes")

    def __init__(self, consumer: Any, batch: int, batch_bytes: int) -> None:
        self._consumer = consumer
        self.batch = batch
        """Records per fetch (``fetch.batch.records``), fewer when they are large."""
        self.batch_bytes = batch_bytes

    def _fetch_records(self, timeout: float, limit: int) -> list[Any]:
        """Up to ``limit`` records from librdkafka (the first waited for ``timeout``); empty when none came.

        The :class:`Inbox` decides when a fetch may happen (:meth:`Inbox.fetch_batch`); this is the call.
        """
        first = self._consumer.poll(timeout)
        if first is None:
            return []
        more = min(self._more_after(first), limit - 1)
        batch: list[Any] = self._consumer.consume(more, 0) if more > 0 else []
        batch.insert(0, first)
        return batch

    def _more_after(self, first: Any) -> int:
        """How many records to take beside ``first``: the batch, unless records of its size would pass the byte bound.

        One record's size stands for the batch's: measuring every record would cost the small
        plain records, which are most records, a call each.
        """
        value = first.value()
        size = len(value) if value is not None else 0
        if size * self.batch <= self.batch_bytes:
            return self.batch - 1
        return max(0, min(self.batch, self.batch_bytes // max(size, 1)) - 1)

    @property
    def client(self) -> Any:
        """The librdkafka consumer itself, for ``HybridConsumer.inner`` and the native group-offset calls."""
        return self._consumer

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self._consumer.subscribe(topics, **callbacks)

    def unsubscribe(self) -> None:
        self._consumer.unsubscribe()

    def assign(self, partitions: list[TopicPartition], *, incremental: bool = False) -> None:
        (self._consumer.incremental_assign if incremental else self._consumer.assign)(partitions)

    def unassign(self, partitions: list[TopicPartition] | None = None) -> None:
        """All partitions, or (``incremental_unassign``) those given."""
        if partitions is None:
            self._consumer.unassign()
        else:
            self._consumer.incremental_unassign(partitions)

    def assignment(self) -> list[TopicPartition]:
        return list(self._consumer.assignment())

    def seek(self, partition: TopicPartition) -> None:
        self._consumer.seek(partition)

    def fetch_positions(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """librdkafka's positions: the offset after the last record it returned (queued ones included)."""
        return list(self._consumer.position(partitions))

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._consumer.pause(partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._consumer.resume(partitions)

    # read-only questions, answered as confluent-kafka answers them
    def cluster_id(self, timeout: float) -> str | None:
        return self._consumer.cluster_id(timeout)  # type: ignore[no-any-return]

    def consumer_group_metadata(self) -> Any:
        return self._consumer.consumer_group_metadata()

    def get_watermark_offsets(self, partition: TopicPartition, **kwargs: Any) -> tuple[int, int] | None:
        return self._consumer.get_watermark_offsets(partition, **kwargs)  # type: ignore[no-any-return]

    def list_topics(self, topic: str | None, timeout: float) -> Any:
        return self._consumer.list_topics(topic=topic, timeout=timeout)

    def memberid(self) -> Any:
        return self._consumer.memberid()

    def offsets_for_times(self, partitions: list[TopicPartition], **kwargs: Any) -> list[TopicPartition]:
        return list(self._consumer.offsets_for_times(partitions, **kwargs))

    def set_sasl_credentials(self, username: str, password: str) -> None:
        self._consumer.set_sasl_credentials(username, password)


class Inbox(ConsumerCalls):
    """The one owner of librdkafka's consumer, of the fetched-record queue and of what waits in it.

    Every step that takes, keeps, fetches or drops goes through :class:`InboxStates`, which states
    the ordering rules once (:mod:`gateway.core.inbox_states`).
    """

    # slots: poll()'s hottest path reads ``counted`` and ``raw`` for every record
    __slots__ = ("_fresh", "_kept", "_pipeline", "_state", "counted", "deferred", "kept", "raw", "refs")

    def __init__(
        self, consumer: Any, batch: int, refs: ReferenceFetcher, batch_bytes: int, pipeline: ConsumerPipeline
    ) -> None:
        super().__init__(consumer, batch, batch_bytes)
        self._pipeline = pipeline
        self._state = InboxState.QUEUED
        self.refs = refs
        self.raw: deque[Any] = deque()
        """Never replaced, only changed in place: ``poll`` and ``consume`` hold on to it."""
        self._fresh = False  # a batch was fetched and take_plain_batch has not looked at it yet
        self.counted: ProvenBatch = CLOSED
        """The fetched batch ``poll()`` hands out by count alone: its ``left`` records are still at the head
        (read-only outside; 0 once the pipeline or the inbox closed it)."""
        self._kept = KeptMessages(pipeline.commits.floors)
        self.kept = self._kept.messages
        """Whole messages delivered and not yet returned: handed out before anything newer (read-only outside;
        never replaced, so ``poll`` reads it with no call)."""
        self.deferred: BaseException | None = None
        """An error to raise first in the next call (read-only outside)."""

    @classmethod
    def open(
        cls, conf: dict[str, Any], batch: int, refs: ReferenceFetcher, batch_bytes: int, pipeline: ConsumerPipeline
    ) -> Inbox:
        """The inbox of a new librdkafka consumer made from ``conf`` (librdkafka's keys only)."""
        return cls(Consumer(conf), batch, refs, batch_bytes, pipeline)

    @property
    def state(self) -> InboxState:
        return self._state

    # -- the proven batch, handed out by count (gateway.core.plain_deliveries) -------------------------
    def _close_counted(self) -> None:
        """Stop counting: the pipeline notes what went (it may have closed the batch itself already)."""
        self._pipeline.close_counted()
        self.counted = CLOSED
        self._move(Step.CLOSE_COUNTED)

    def _move(self, step: Step) -> None:
        self._state = next_state(self._state, step)

    def make_way_for_returned(self) -> None:
        """A driver's results came back (:mod:`gateway.consumer.handoff`): they go before the rest of a
        proven batch, so counting stops here."""
        if self._state is InboxState.COUNTED:
            self._close_counted()

    def _step(self, step: Step) -> None:
        """``step`` after closing a proven batch: the one place every step but counting passes. The table
        is read in place (what :func:`~gateway.core.inbox_states.next_state` does): this runs per record."""
        if self._state is InboxState.COUNTED:
            self._close_counted()
        try:
            self._state = TABLE[self._state][step]
        except KeyError:
            raise out_of_order(self._state, step) from None

    def open_plain_batch(self) -> Any | None:
        """A fresh batch's first record when the whole batch is proven plain; the rest then go by count."""
        self._step(Step.TAKE_QUEUED)  # the head is taken either way: by count, or else by the full path
        batch = self._pipeline.open_counted(list(self.raw))
        if batch is None:
            return None
        self._step(Step.OPEN_COUNTED)
        self.counted = batch
        return self.take_counted()

    def take_counted(self) -> Any:
        """The next record of the proven batch (``poll()``'s hottest path: ``counted.left`` said there is one).

        ``left`` is above 0 only in the counted state, so this step is not looked up in the table.
        """
        self.counted.left -= 1
        return self.raw.popleft()

    def take_proven(self, out: list[Any], limit: int, room: int) -> int:
        """What is left of the proven batch, up to ``limit`` in ``out`` and ``room`` bytes, in bulk: the bytes taken."""
        counted = self.counted
        if not counted.left:
            return 0
        self._move(Step.TAKE_COUNTED)
        take = min(counted.left, limit - len(out))
        size = sum(map(len, islice(self.raw, take)))  # one C pass: the common case, all of them fit
        if size > room:
            sizes = self.fitting(take, room, first=not out)
            take, size = len(sizes), sizes[-1] if sizes else 0
        out.extend(islice(self.raw, take))
        drop_head(self.raw, take)
        counted.left -= take
        if not counted.left:
            self._close_counted()
        return size

    def fitting(self, most: int, room: int, *, first: bool = False) -> list[int]:
        """:func:`fit` over the first ``most`` queued records (``consume.max.bytes``)."""
        return fit(islice(self.raw, most), room, first=first)

    # -- whole messages kept back for the next call (what waits: KeptMessages; the steps: here) ----------
    def keep(self, messages: Iterable[Any], before: Mapping[TopicPartitionKey, Progress]) -> None:
        """Whole messages delivered but not returned wait first in line, holding their partitions' commits."""
        self._step(Step.KEEP)
        self._kept.add(messages, before, self._pipeline.progress())

    def take_kept(self) -> Any:
        """The first kept message; the commits it held go with the last."""
        self._move(Step.TAKE_KEPT)
        msg = self.kept.popleft()
        self._kept_taken()
        return msg

    def defer(self, exc: BaseException) -> None:
        """An error met after a call had collected messages: the call returns them, the next raises it first."""
        self._step(Step.KEEP)
        self.deferred = exc

    def take_deferred(self) -> BaseException:
        self._move(Step.TAKE_KEPT)
        exc, self.deferred = self.deferred, None
        self._kept_taken()
        return exc  # type: ignore[return-value]

    def kept_floor(self, tp: TopicPartitionKey) -> int | None:
        """The offset no commit of ``tp`` may pass while messages are kept back, or None."""
        return self._kept.floor(tp)

    def _drop_kept(self, key: TopicPartitionKey | None) -> None:
        """Kept messages of ``key`` (all, and the deferred error, for None) go: the reading starts over."""
        if self._state is not InboxState.KEPT:
            return
        if key is None:
            self.deferred = None
        self._kept.drop(key)
        self._kept_taken()

    def _kept_taken(self) -> None:
        if self._kept.settle() and self.deferred is None:
            self._move(Step.LAST_KEPT)

    # -- the queue ---------------------------------------------------------------------------------
    def pop(self) -> Any:
        """The head record, for the full path."""
        self._step(Step.TAKE_QUEUED)
        return self.raw.popleft()

    def take_plain_head(self) -> Any | None:
        """The head, taken out if it is plainly plain and its partition allows a run; else None."""
        self._step(Step.TAKE_QUEUED)
        head = self.raw[0]
        if (
            head.error() is None
            and is_plainly_plain(head.value(), head.headers())
            and self._pipeline.deliver_plain((head.topic(), head.partition()), head.offset())
        ):
            return self.raw.popleft()
        return None

    def proven_whole(self, batch: list[Any]) -> list[Any]:
        """``batch`` itself, noted as delivered, when it is proven plain: the list librdkafka returned is
        the list the caller gets, at no cost per record. Else it is queued for the full path and ``[]``."""
        self._step(Step.TAKE_QUEUED)
        if batch and self._pipeline.deliver_proven(batch):
            return batch
        self.enqueue(batch)
        return []

    # -- fetching --------------------------------------------------------------------------------
    def fetch(self, timeout: float) -> bool:
        """One batch from librdkafka into the queue; False when ``timeout`` passed with nothing."""
        batch = self.fetch_batch(timeout, self.batch)
        self.enqueue(batch)
        return bool(batch)

    def fetch_batch(self, timeout: float, limit: int) -> list[Any]:
        """Up to ``limit`` records from librdkafka, not queued: empty when ``timeout`` passed with nothing."""
        self._step(Step.FETCH)
        return self._fetch_records(timeout, limit)

    def enqueue(self, batch: list[Any]) -> None:
        """Fetched records behind those queued; referenced payloads among them start downloading."""
        if not batch:
            return
        self._step(Step.FETCH)
        self.raw.extend(batch)
        self._fresh = True
        self.refs.scan_messages(batch)

    def take_plain(self, out: list[Any], limit: int) -> int:
        """Plain records from the head of the queue into ``out``: a fresh batch whole when it can be.

        The whole-batch test runs once per fetched batch, so a mixed batch is not scanned again
        for every run in it; then runs of one partition (see :mod:`gateway.core.plain_runs`).
        """
        self._step(Step.TAKE_QUEUED)
        if self._fresh:
            self._fresh = False
            moved = take_plain_batch(self.raw, self._pipeline, out, limit)
            if moved:
                return moved
        return take_plain_run(self.raw, self._pipeline, out, limit)

    def next_offsets(self, wanted: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The offset of the first queued record of each partition in ``wanted`` that has one."""
        keys = set(wanted)
        out: dict[TopicPartitionKey, int] = {}
        for msg in self.raw:
            key = partition_of(msg)
            if key in keys and key not in out and msg.error() is None:
                out[key] = msg.offset()
        return out

    def partitions(self) -> set[TopicPartitionKey]:
        return {partition_of(m) for m in self.raw}

    def drop(self, key: TopicPartitionKey) -> None:
        """``key``'s reading starts over (seek, assign, revoke): its queued records, the payloads fetched
        ahead for them and its kept messages go; they are read again from where it now reads."""
        self.drop_queued(key)
        self._drop_kept(key)

    def drop_queued(self, key: TopicPartitionKey) -> None:
        """Forget ``key``'s queued records and the payloads fetched ahead for them (it waits for room: the
        pipeline keeps what it delivered, so what it kept stays)."""
        self._step(Step.DROP)
        if self.raw:
            drop_partition(self.raw, key)
        self.refs.discard(lambda k: (k[0], k[1]) != key)  # type: ignore[index]

    def clear(self) -> None:
        """Nothing queued, nothing kept (unassign, unsubscribe, close)."""
        self._step(Step.DROP)
        self._drop_kept(None)
        self.raw.clear()
        self.refs.clear()

    def close(self) -> None:
        """Drop what is queued, then close librdkafka's consumer (its last callbacks run now)."""
        self.clear()
        self._consumer.close()


class KeptMessages:
    """Whole messages delivered by a call but not returned by it, and the commits they hold back.

    Kept apart from :class:`Inbox` because it is bookkeeping of its own (which partition's commit
    stays where, and when it is let go) with no part in librdkafka or the fetched queue; the inbox
    still takes every step of its state (:mod:`gateway.core.inbox_states`) and hands this only the
    commit floors it keeps (:class:`~gateway.core.commits.CommitFloors`).
    """

    __slots__ = ("_floors", "messages")

    def __init__(self, floors: CommitFloors) -> None:
        self.messages: deque[Any] = deque()
        """Never replaced, only changed in place: the inbox hands it out as ``Inbox.kept``."""
        self._floors = floors  # where kept messages bound commits: read by the translator

    def add(
        self,
        messages: Iterable[Any],
        before: Mapping[TopicPartitionKey, Progress],
        now: Mapping[TopicPartitionKey, Progress],
    ) -> None:
        """Until the last is handed out, commits of their partitions stay where ``before`` had them (from its
        first offset, as ``now`` has it, a partition ``before`` did not know)."""
        for msg in messages:
            self.messages.append(msg)
            tp = partition_of(msg)
            floor = before[tp][0] if tp in before else now[tp][2] if tp in now else None
            if floor is not None:
                self._floors.keep(tp, floor)

    def floor(self, tp: TopicPartitionKey) -> int | None:
        return self._floors.kept(tp)

    def drop(self, key: TopicPartitionKey | None) -> None:
        """The messages of ``key`` (all, for None) go, and the commits they held with them."""
        if key is None:
            self.messages.clear()
        else:
            drop_partition(self.messages, key)
            self._floors.unkeep(key)

    def settle(self) -> bool:
        """After a take or a drop: True when none is left, the commits they held then let go."""
        if self.messages:
            return False
        self._floors.unkeep()
        return True


class FlowControl:
    """Partitions paused for room (ours) and partitions the application paused (its own).

    The librdkafka side of waiting for room (decided in :mod:`gateway.core.flow`).

    When the assembler's buffer is full, the pipeline answers with a
    :class:`~gateway.core.events.FlowChange`. A partition that must wait is paused and sought back to
    the offset it is to be read again from; the seek is what makes librdkafka drop the records of it
    already prefetched (a pause alone leaves them to be returned), and the records of it already in
    the consumer's own queue are dropped here. Nothing of it is lost (it is read again) and nothing is
    handed out twice (the pipeline passes over what it had handled). On resume the partition is sought
    to the same offset again, since a resume may restart fetching from the last position handed out.

    The application's own ``pause``/``resume`` are kept apart: a partition it paused stays paused
    when the pipeline lets it go on, and its ``resume`` does not undo a pause for room.
    """

    def __init__(self, inbox: Inbox, pipeline: ConsumerPipeline) -> None:
        self._inbox = inbox
        self._pipeline = pipeline
        self.paused: dict[TopicPartitionKey, int] = {}
        """Paused for room, with the offset each is read again from."""
        self.user_paused: set[TopicPartitionKey] = set()

    def act(self, events: list[Event]) -> None:
        """Carry out the flow change among one record's events, if there is one."""
        for event in events:
            if type(event) is FlowChange:
                self.apply(event)

    def apply(self, change: FlowChange) -> None:
        if change.waits:
            for wait in change.waits:
                self._inbox.drop_queued(wait.tp)
            self._inbox.pause([TopicPartition(t, p) for (t, p), _ in _latest(change.waits)])
            for tp, at in _latest(change.waits):
                self._inbox.seek(TopicPartition(tp[0], tp[1], at))
                self.paused[tp] = at
                log.info("%s[%d] waits for room in the assembler; read again from %d", tp[0], tp[1], at)
        resumes = [(tp, at) for tp, at in _latest(change.resumes) if self.paused.pop(tp, None) is not None]
        if resumes:
            go = [TopicPartition(t, p) for (t, p), _ in resumes if (t, p) not in self.user_paused]
            if go:
                self._inbox.resume(go)
            for tp, at in resumes:
                self._inbox.seek(TopicPartition(tp[0], tp[1], at))

    def settle(self, keys: Iterable[TopicPartitionKey]) -> None:
        """Partitions left or were sought (their state is gone): ours are resumed as they are; then
        whatever the pipeline decided meanwhile for the others is carried out."""
        mine = [tp for tp in keys if self.paused.pop(tp, None) is not None]
        go = [TopicPartition(t, p) for t, p in mine if (t, p) not in self.user_paused]
        if go:
            try:
                self._inbox.resume(go)
            except KafkaException as exc:  # a partition no longer assigned: nothing stays paused anyway
                log.debug("resume of partitions that left: %s", exc)
        for change in self._pipeline.flow_changes():
            self.act([change])

    def reset(self) -> None:
        """Unassign, unsubscribe: no partition is ours to resume any more."""
        self.paused.clear()
        self._pipeline.flow_changes()  # nothing waits any more: the pipeline forgot them too

    # -- the application's own pause and resume -------------------------------------------------
    def user_pause(self, partitions: Sequence[TopicPartition]) -> None:
        self._inbox.pause(list(partitions))
        self.user_paused.update((tp.topic, tp.partition) for tp in partitions)

    def user_resume(self, partitions: Sequence[TopicPartition]) -> None:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self.user_paused.difference_update(keys)
        rest = [tp for tp, key in zip(partitions, keys, strict=True) if key not in self.paused]
        if rest:
            self._inbox.resume(rest)


def _latest(waits: Sequence[Wait]) -> list[tuple[TopicPartitionKey, int]]:
    """One entry per partition: the lowest offset given for it (a partition may be told twice)."""
    out: dict[TopicPartitionKey, int] = {}
    for wait in waits:
        out[wait.tp] = min(wait.resume_at, out.get(wait.tp, wait.resume_at))
    return list(out.items())
