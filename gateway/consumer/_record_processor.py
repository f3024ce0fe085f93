"""Records into messages in :class:`~gateway.consumer._hybrid_consumer.HybridConsumer`: the loop that hands
them out (:class:`MessageCollector`) and the full path of one raw record (:class:`RecordProcessor`).

The consumer fetches records and hands messages out; every record its plain fast paths do not
take comes to the full path, the one place that feeds a record to the sans-IO pipeline and acts on the events
it returns. The pipeline asks for a partition's commit (:class:`~gateway.core.events.CommitNeeded`)
before it judges the partition's first record, so that what it decides about delivery starts from
the committed position; the commits of every partition queued behind it are read in the same call.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import Message

from gateway import tracing
from gateway.consumer._events import EventHandler
from gateway.consumer._inbox import FlowControl, Inbox, partition_of
from gateway.consumer._offsets import OffsetDriver
from gateway.core.events import CommitNeeded, WholeMessage
from gateway.core.offsets import Progress
from gateway.core.pipeline import ConsumerPipeline
from gateway.errors import GatewayError
from gateway.protocol.classify import is_plainly_plain
from gateway.protocol.records import Record, TopicPartitionKey
from gateway.serialization import Deserializers
from gateway.store import Store


class RecordProcessor:
    """One raw record in, the message the application gets (or nothing) out.

    ``traced`` is set by the consumer with every fetched batch: a traced message gets its span here.
    """

    def __init__(
        self,
        pipeline: ConsumerPipeline,
        events: EventHandler,
        offsets: OffsetDriver,
        queue: Inbox,
        stores: Mapping[str, Store],
        flow: FlowControl,
        spans: tracing.ConsumerTelemetry,
        *,
        keys_read: bool,
    ) -> None:
        self._pipeline = pipeline
        self._events = events
        self._offsets = offsets
        self._inbox = queue
        self._flow = flow
        self._stores = stores  # the consumer's own dict: a store added later is seen here too
        self._keys_read = keys_read
        self.traced = False
        self.spans = spans

    def handle(self, msg: Any) -> Message | None:
        if msg.error() is not None:
            return msg  # type: ignore[no-any-return]
        tp = (msg.topic(), msg.partition())
        # key and timestamp stay with msg; only a peer's record (bakdata) may need its key decoded
        record = Record(msg.offset(), msg.key() if self._keys_read else None, msg.value(), msg.headers())
        try:
            events = self._pipeline.feed(tp, record)
            if events and type(events[0]) is CommitNeeded:  # the partition's first record: nothing was done
                self._offsets.load_commits([msg, *self._inbox.raw])
                events = self._pipeline.feed(tp, record)
            self._flow.act(events)  # before anything else is taken from the queue
            out = self._events.handle(msg, events)
            if out is not None and self.traced:
                self.spans.consumed(out, *_span_fields(events))
            return out
        except GatewayError as exc:  # every typed error leaves with its record, nothing is lost
            if exc.kafka_message is None:
                exc.kafka_message = msg
            if self.traced:
                self.spans.failed(msg, exc)
            raise
        finally:  # after resolving, so a payload fetched ahead is used; also frees one never taken
            if self._stores:
                self._inbox.refs.done((tp[0], tp[1], record.offset))


def _span_fields(events: Sequence[Any]) -> tuple[str, str | None, int]:
    """Route, store and segment count of the whole message among ``events``, for its span."""
    whole = [e for e in events if isinstance(e, WholeMessage)]
    if not whole:
        return "plain", None, 1
    last = whole[-1]
    return last.route.value, last.envelope.store if last.envelope is not None else None, last.number_of_segments


class BatchFetcher:
    """What a reading call fetches: a batch into the inbox, or one handed out as it came (:meth:`fetch_batch`);
    commit results served as confluent-kafka serves them when it polls, and the pipeline told whether anything
    came while partitions wait for room.

    ``plain_runs_on`` says whether plain records may go by bookkeeping alone: decided again with every
    fetched batch (never while tracing, whose spans need the full path; never with an auditor).
    """

    __slots__ = ("_auto_commit_when_due", "_events", "_flow", "_inbox", "_offsets", "_path", "_pipeline",
                 "_runs_allowed", "plain_runs_on")  # fmt: skip

    def __init__(
        self,
        inbox: Inbox,
        pipeline: ConsumerPipeline,
        path: RecordProcessor,
        offsets: OffsetDriver,
        flow: FlowControl,
        events: EventHandler,
        auto_commit_when_due: Callable[[], None],
        *,
        plain_runs_allowed: bool,
    ) -> None:
        self._inbox = inbox
        self._pipeline = pipeline
        self._path = path
        self._offsets = offsets
        self._flow = flow
        self._events = events
        self._auto_commit_when_due = auto_commit_when_due
        self._runs_allowed = plain_runs_allowed
        self.plain_runs_on = False
        """Looked up once per fetched batch; False once the consumer closed (what is queued was dropped)."""

    def fetch(self, timeout: float) -> bool:
        """One batch into the queue; whether plain runs may be taken is decided again for it."""
        fetched = self._inbox.fetch(timeout)
        self._offsets.commits.serve_results()  # on_commit runs when the consumer polls, as in confluent-kafka
        self.refresh_runs()
        if self._pipeline.waiting:  # partitions wait for room (gateway.consumer._inbox)
            self._waited(fetched)
        return fetched

    def fetch_batch(self, limit: int, timeout: float) -> list[Message]:
        """Up to ``limit`` records, not queued (the caller hands them out or queues them)."""
        self._auto_commit_when_due()
        batch: list[Message] = self._inbox.fetch_batch(timeout, limit)
        self._offsets.commits.serve_results()
        if self._pipeline.waiting:  # partitions wait for room (gateway.consumer._inbox)
            self._waited(bool(batch))
        return batch

    def _waited(self, fetched: bool) -> None:
        """While partitions wait for room: a fetch that brought nothing may mean the message they wait
        for cannot finish; the pipeline decides, and a message it gives up is reported like any drop."""
        if fetched:
            self._pipeline.fetched()
            return
        events = self._pipeline.idle(time.monotonic())
        if events:
            self._flow.act(events)
            self._events.handle(None, events)

    def refresh_runs(self) -> bool:
        """Whether plain records may go by bookkeeping alone: decided again with every fetched batch."""
        traced = self._path.traced = tracing.enabled()  # looked up with every fetch, not for every record
        self.plain_runs_on = self._runs_allowed and not traced  # a traced message gets its span on the full path
        return self.plain_runs_on


class MessageCollector:
    """The one loop of ``poll()`` and ``consume()`` (:meth:`collect`): whole messages from what is kept back,
    counted out, queued and fetched (:class:`BatchFetcher`), each through the full path
    (:class:`RecordProcessor`) or by bookkeeping alone, deserialized, within the call's count and bytes.
    """

    __slots__ = (
        "_auto_commit_when_due",
        "_deserialize",
        "_deserializers",
        "_expect",
        "_fetcher",
        "_inbox",
        "_path",
        "_pipeline",
        "refused_rest",
    )

    def __init__(
        self,
        inbox: Inbox,
        pipeline: ConsumerPipeline,
        path: RecordProcessor,
        fetcher: BatchFetcher,
        deserializers: Deserializers,
        auto_commit_when_due: Callable[[], None],
    ) -> None:
        self._inbox = inbox
        self._path = path
        self._pipeline = pipeline
        self._fetcher = fetcher
        self._deserializers = deserializers
        self._deserialize = bool(deserializers)
        self._auto_commit_when_due = auto_commit_when_due
        self._expect = 0  # the size of the last whole message taken: what the next one likely is
        self.refused_rest: deque[Message] = deque()
        """Behind a refused one: kept in the inbox once the call ends (:meth:`keep_refused`)."""

    def collect_for_consume(self, out: list[Message], limit: int, room: int, timeout: float) -> None:
        """:meth:`collect` for a ``consume()`` call: its first message sets what the next are expected to be."""
        self._expect = 0
        self.collect(out, limit, room, timeout)

    def keep_refused(self, before: Mapping[TopicPartitionKey, Progress]) -> None:
        """What was delivered behind a refused message, not received: kept for the next calls."""
        if self.refused_rest:
            self._inbox.keep(self.refused_rest, before)
            self.refused_rest.clear()

    def _fetch_proven(self, limit: int, timeout: float, room: int) -> tuple[list[Message], int]:
        """A fetched batch handed out as it came, with its bytes, when it is proven plain and fits in ``room``;
        else queued for the full path (which takes what fits)."""
        batch = self._fetcher.fetch_batch(limit, timeout)
        if self._fetcher.refresh_runs():
            size = sum(map(len, batch))  # one C pass over the batch
            if size <= room or len(batch) == 1:
                out = self._inbox.proven_whole(batch)
                return out, size if out else 0
        self._inbox.enqueue(batch)
        return [], 0

    def _take_some_proven(self, out: list[Message], limit: int, room: int) -> int:
        taken = len(out)
        size = self._inbox.take_proven(out, limit, room)
        if self._deserialize:
            self._deserializers.apply_from(out, taken, self.refused_rest)
        return size

    def collect(self, out: list[Message], limit: int, room: int, timeout: float) -> None:
        """The one loop of ``poll()`` and ``consume()``: whole messages into ``out``, up to ``limit`` of them
        and ``room`` bytes (the first whatever its size), waiting ``timeout`` for the first only.

        In order: the error deferred by the last call, the messages kept back, the rest of a proven batch,
        the queue, then fetches. ``consume.max.bytes`` is decided here and nowhere else, so the aio
        client's calls, which run these, are bounded too.
        """
        queue = self._inbox
        self._auto_commit_when_due()
        deadline: float | None = None  # computed only once the queue runs dry: the common case needs no clock
        while True:
            if queue.deferred is not None:
                if out:
                    return
                raise queue.take_deferred()
            if queue.kept:
                room = self._take_kept(out, limit, room)
                if queue.kept or len(out) >= limit:
                    return
            if queue.counted.left:  # the rest of a batch poll() proved
                room -= self._take_some_proven(out, limit, room)
                if queue.counted.left:
                    return
            room = self._drain(out, limit, room)
            if room < 0 or len(out) >= limit:
                return
            if out:  # more only as far as librdkafka has them now
                if room <= 0 or not self._fetcher.fetch(0):
                    return
                continue
            if deadline is None and timeout is not None and timeout >= 0:
                deadline = time.monotonic() + timeout
            remaining = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            room = self._fetch_first(out, limit, room, remaining)
            if len(out) >= limit:
                return
            if not out and not queue.raw and deadline is not None and time.monotonic() >= deadline:
                return

    def _fetch_first(self, out: list[Message], limit: int, room: int, timeout: float) -> int:
        """The fetch that brings a call its first message: a batch proven plain goes as it came (for
        ``consume``) or is counted out (for ``poll``); else it is queued. The room left."""
        queue, fetcher = self._inbox, self._fetcher
        if limit > 1 and fetcher.plain_runs_on:
            got, size = self._fetch_proven(limit, timeout, room)
            if got:
                out.extend(got)
                if self._deserialize:
                    self._deserializers.apply_from(out, 0, self.refused_rest)
            return room - size
        if fetcher.fetch(timeout) and fetcher.plain_runs_on and limit == 1:
            first = queue.open_plain_batch() or queue.take_plain_head()  # poll()'s hot path too
            if first is not None:
                return room - self._hand_out(out, first)
        return room

    def _take_kept(self, out: list[Message], limit: int, room: int) -> int:
        """Messages kept back into ``out``, as far as ``limit`` and ``room`` allow: the room left."""
        queue = self._inbox
        while queue.kept and len(out) < limit:
            size = len(queue.kept[0])
            if size > room and out:
                break
            room -= self._hand_out(out, queue.take_kept())
        return room

    def _drain(self, out: list[Message], limit: int, room: int) -> int:
        """Queued records into ``out``: the room left, or -1 when the next message does not fit. Until a
        call holds one message the full path takes them (``poll()`` tried the plain head before); then
        plain records go by bookkeeping where they may, in runs."""
        queue = self._inbox
        runs = self._fetcher.plain_runs_on  # no fetch until this returns
        queued = -1  # at most how many bytes the queue holds: measured once per fetch, in C
        while queue.raw and len(out) < limit:
            if runs and out:
                if queued < 0:
                    queued = sum(map(len, queue.raw))
                size = self._take_plain_within(out, limit, room, queued)
                if size >= 0:
                    room -= size
                    queued -= size
                    continue
            room = self._handle_within(out, room)
            if room < 0:
                return -1
        return room

    def _take_plain_within(self, out: list[Message], limit: int, room: int, queued: int) -> int:
        """Plain records from the head into ``out`` within ``room`` bytes: their bytes, or -1 when none went.
        While all that is queued fits, they go by count and are measured once taken; else they are measured
        first, so that a mixed queue is not measured again for every run."""
        queue = self._inbox
        taken = len(out)
        if queued <= room:
            if not queue.take_plain(out, limit):
                return -1
            size = sum(map(len, out[taken:]))
        else:
            sizes = queue.fitting(limit - taken, room)
            moved = queue.take_plain(out, taken + len(sizes)) if sizes else 0
            if not moved:
                return -1
            size = sizes[moved - 1]
        if self._deserialize:
            self._deserializers.apply_from(out, taken, self.refused_rest)
        return size

    def _handle_within(self, out: list[Message], room: int) -> int:
        """The head through the full path into ``out`` if its message fits in ``room``; the room left, or -1
        when it does not fit.

        A head that is not plainly plain is not even handled when a message of the last one's size would
        not fit, so that a stream of large messages is assembled one call at a time, as ``poll()`` holds
        it. A message still found too large once whole was delivered already: it is kept for the next
        call, first in line, and commits stay below it until then, as for any message not yet returned.
        """
        queue = self._inbox
        if not out:  # the first message of a call goes whatever its size
            first = self._path.handle(queue.pop())
            if first is None:
                return room
            return room - self._hand_out(out, first)
        head = queue.raw[0]
        before: dict[TopicPartitionKey, Progress] | None = None
        if is_plainly_plain(head.value(), head.headers()):
            if len(head) > room:
                return -1  # a plain record stays queued as it is
        elif self._expect > room:
            return -1
        else:
            tp = partition_of(head)
            now = self._pipeline.progress_of(tp)  # where its commit stands, should its message not fit
            before = {} if now is None else {tp: now}
        msg = self._path.handle(queue.pop())
        if msg is None:
            return room
        size = self._expect = len(msg)
        if before is not None and size > room:
            queue.keep([msg], before)
            return -1
        self._hand_out(out, msg)
        return room - size

    def _hand_out(self, out: list[Message], msg: Message) -> int:
        """``msg`` into ``out``, deserialized: its value bytes, measured before (the first of a call's
        stands for what the next is likely to be)."""
        size = _bytes_of(msg)
        if not out:
            self._expect = size
        out.append(msg)
        if self._deserialize:
            self._deserializers.apply_from(out, len(out) - 1, self.refused_rest)
        return size


def _bytes_of(msg: Message) -> int:
    """A message's value bytes, or 0 once a deserializer made it an object: the first message of a call
    goes whatever its size, and every later one is measured before it is deserialized."""
    try:
        return len(msg)
    except TypeError:
        return 0
