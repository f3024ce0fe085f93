"""``HybridConsumer``: a confluent-kafka ``Consumer`` that hands back whole messages.

Chunked, reference and plain records all come out of ``poll`` as ``confluent_kafka.Message``
objects: the record that completes a message, with ``set_value`` / ``set_headers`` applied (a
plain record untouched but for a ``_so`` header while a large message is pending, LinkedIn's rule).
Raw records wait in a local queue until ``poll`` hands one out: a message counts as delivered
(and committable) when the caller receives it, never earlier (:mod:`gateway.consumer.handoff` for
drivers that carry results to another thread).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, Message
from confluent_kafka.error import KeyDeserializationError, ValueDeserializationError

from gateway import tracing
from gateway.auditing import Auditor
from gateway.consumer._commits import GroupCommits
from gateway.consumer._confluent_methods import ConfluentMethods
from gateway.consumer._events import EventHandler
from gateway.consumer._inbox import FlowControl, Inbox, partition_of
from gateway.consumer._offsets import OffsetDriver
from gateway.consumer._record_processor import RecordProcessor
from gateway.consumer.config import parse_consumer_config
from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.consumer.handoff import Handoff
from gateway.core.offsets import Progress
from gateway.encryption import KeyProvider, ReferenceEncryption
from gateway.errors import GatewayError
from gateway.librdkafka.group_offsets import group_offsets
from gateway.protocol.classify import is_plainly_plain
from gateway.protocol.records import TopicPartitionKey
from gateway.serialization import Deserializers
from gateway.store import Store, checked_stores

log = logging.getLogger(__name__)

_UNBOUNDED = 1 << 62
"""``poll()``'s room: one message, whatever its size."""


# the stubs narrow three returns the C code does not (cluster_id, get_watermark_offsets, commit): ours keep its
class HybridConsumer(ConfluentMethods, Consumer):  # type: ignore[misc]
    """Drop-in for ``confluent_kafka.Consumer`` that reassembles and resolves large messages.

    A ``Consumer`` subclass, as ``DeserializingConsumer`` is, that overrides every method and drives
    its own librdkafka consumer (:attr:`inner`); its base handle is never opened. Our keys are in
    :mod:`gateway.consumer.config`, the rest go to librdkafka; keyword arguments add to ``config``.
    """

    # what poll() reads, in slots: on a subclass of a C type, instance-dict reads are twice as slow
    __slots__ = ("_auto_commit", "_deserialize", "_deserializers", "_handoff", "_inbox", "_plain_runs_on", "_spans")

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        stores: Mapping[str, Store] | None = None,
        *,
        auditor: Auditor | None = None,
        key_provider: KeyProvider | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(config, Mapping) and not (config is None and kwargs):
            raise TypeError("expected configuration dict")  # confluent-kafka's words, for None and the like
        config = {**(config or {}), **kwargs}
        self._deserializers = Deserializers.pop_from(config)
        self._deserialize = bool(self._deserializers)  # read on every poll: an attribute, not a __bool__ call
        settings, conf = parse_consumer_config(config)
        if settings.on_commit is not None:
            conf["on_commit"] = self._on_commit
        self._auto_commit, self._auto_commit_s = settings.auto_commit, settings.auto_commit_s
        self._max_bytes = settings.consume_max_bytes
        self._expect = 0
        self.stores: dict[str, Store] = checked_stores(stores)
        self._resolver = settings.resolver(self.stores, ReferenceEncryption(key_provider))
        self._auditor = auditor
        if auditor is not None:
            auditor.start()
        self._pipeline = settings.pipeline(awaits_commits=True, pauses=True)
        self._spans = tracing.ConsumerTelemetry(conf)  # process spans end when the application is back
        self._inbox = Inbox.open(
            conf, settings.batch, ReferenceFetcher(self._resolver), settings.batch_bytes, self._pipeline
        )
        self._flow = FlowControl(self._inbox, self._pipeline)
        self._events = EventHandler.for_consumer(settings, conf, self._pipeline, self._inbox.refs, auditor, log)
        commits = GroupCommits(
            group_offsets(self._inbox.client),
            self._pipeline,
            settings.on_commit,
            self._events.warnings,
            encoding=settings.commit_encoding,
        )
        self._offsets = OffsetDriver(
            self._pipeline,
            self._inbox,
            commits,
            self._flow,
            auto_offset_store=settings.auto_offset_store,
        )
        self._path = RecordProcessor(
            self._pipeline,
            self._events,
            self._offsets,
            self._inbox,
            self.stores,
            self._flow,
            self._spans,
            keys_read=settings.peers is not None,
        )
        self._refused_rest: deque[Message] = deque()  # behind a refused one: kept in the inbox once the call ends
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._plain_runs_allowed = auditor is None  # an audited message is counted one by one, on the full path
        self._plain_runs_on = False  # _plain_runs unless tracing is on; looked up once per fetched batch
        self._handoff = Handoff(
            self._pipeline.progress, self._inbox.make_way_for_returned, self._pipeline.commits.floors
        )
        self._closed = False

    # -- fetching and processing -------------------------------------------------------------
    def poll(self, timeout: float = -1) -> Message | None:
        """One whole message, an error event, or ``None`` when ``timeout`` passes. A record that cannot
        become a message raises a typed :class:`~gateway.errors.GatewayError` carrying it in ``kafka_message``
        (a refused deserialization confluent-kafka's ``Key/ValueDeserializationError``); the next goes on."""
        queue = self._inbox
        if (
            queue.counted.left
        ):  # the hottest path: the rest of a batch proven plain as a whole (gateway.consumer._inbox)
            head: Message = queue.take_counted()
            if self._auto_commit:
                self._auto_commit_when_due()
            return self._deserializers.apply(head) if self._deserialize else head
        if self._spans.held:  # the application is back: the messages it held are processed
            self._spans.release()
        if self._handoff.returned:  # what a driver handed over and got back goes first (gateway.consumer.handoff)
            return self._handoff.take_one()  # type: ignore[no-any-return]
        if queue.raw and self._plain_runs_on and not queue.kept and queue.deferred is None:
            plain: Message | None = queue.take_plain_head()  # the hot path: delivered by bookkeeping alone
            if plain is not None:
                if self._auto_commit:
                    self._auto_commit_when_due()
                return self._deserializers.apply(plain) if self._deserialize else plain
        out: list[Message] = []
        self._collect(out, 1, _UNBOUNDED, timeout)
        return out[0] if out else None

    def _auto_commit_when_due(self) -> None:
        if self._auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self._auto_commit_s
            self._offsets.commit_quietly(asynchronous=True)

    def _fetch(self, timeout: float) -> bool:
        """One batch into the queue; whether plain runs may be taken is decided again for it."""
        fetched = self._inbox.fetch(timeout)
        self._offsets.commits.serve_results()  # on_commit runs when the consumer polls, as in confluent-kafka
        self._refresh_runs()
        if self._pipeline.waiting:  # partitions wait for room (gateway.consumer._inbox)
            self._waited(fetched)
        return fetched

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

    def _refresh_runs(self) -> bool:
        """Whether plain records may go by bookkeeping alone: decided again with every fetched batch."""
        traced = self._path.traced = tracing.enabled()  # looked up with every fetch, not for every record
        self._plain_runs_on = self._plain_runs_allowed and not traced  # a traced message gets its span on the full path
        return self._plain_runs_on

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to ``num_messages`` whole messages; waits ``timeout`` for the first only. An error raised
        after some were collected is kept and raised by the next call, so none of them is lost."""
        if not 0 <= num_messages <= 1_000_000:
            raise ValueError("num_messages must be between 0 and 1000000 (1M)")  # confluent-kafka's bound and words
        self._check_open()
        if self._spans.held:  # the application is back: the messages it held are processed
            self._spans.release()
        if num_messages == 0:
            return []
        if self._handoff.returned:
            return self._handoff.take(num_messages)
        # where commits stand, should a refusal keep some back
        before = self._pipeline.progress() if self._deserialize else None
        out: list[Message] = []
        self._expect = 0  # the size of the last whole message taken: what the next one likely is
        try:
            self._collect(out, num_messages, self._max_bytes, timeout)
        except (GatewayError, KeyDeserializationError, ValueDeserializationError) as exc:
            if self._refused_rest and before is not None:  # delivered, not received: kept for the next calls
                self._inbox.keep(self._refused_rest, before)
                self._refused_rest.clear()
            if not out:
                raise
            self._inbox.defer(exc)
        return out

    def _fetch_proven(self, limit: int, timeout: float, room: int) -> tuple[list[Message], int]:
        """A fetched batch handed out as it came, with its bytes, when it is proven plain and fits in ``room``;
        else queued for the full path (which takes what fits)."""
        self._auto_commit_when_due()
        batch = self._inbox.fetch_batch(timeout, limit)
        self._offsets.commits.serve_results()
        if self._pipeline.waiting:  # partitions wait for room (gateway.consumer._inbox)
            self._waited(bool(batch))
        if self._refresh_runs():
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
            self._deserializers.apply_from(out, taken, self._refused_rest)
        return size

    def _collect(self, out: list[Message], limit: int, room: int, timeout: float) -> None:
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
                if room <= 0 or not self._fetch(0):
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
        queue = self._inbox
        if limit > 1 and self._plain_runs_on:
            got, size = self._fetch_proven(limit, timeout, room)
            if got:
                out.extend(got)
                if self._deserialize:
                    self._deserializers.apply_from(out, 0, self._refused_rest)
            return room - size
        if self._fetch(timeout) and self._plain_runs_on and limit == 1:
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
        queued = -1  # at most how many bytes the queue holds: measured once per fetch, in C
        while queue.raw and len(out) < limit:
            if self._plain_runs_on and out:
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
            self._deserializers.apply_from(out, taken, self._refused_rest)
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
            self._deserializers.apply_from(out, len(out) - 1, self._refused_rest)
        return size


def _bytes_of(msg: Message) -> int:
    """A message's value bytes, or 0 once a deserializer made it an object: the first message of a call
    goes whatever its size, and every later one is measured before it is deserialized."""
    try:
        return len(msg)
    except TypeError:
        return 0
