"""``HybridConsumer``: a confluent-kafka ``Consumer`` that hands back whole messages.

Chunked (LinkedIn segments), reference and plain records all come out of ``poll`` as
``confluent_kafka.Message`` objects: the record that completes a message, with ``set_value`` /
``set_headers`` applied. A plain record is returned as librdkafka produced it, untouched except
for a ``_so`` header appended while a large message is pending in its partition (LinkedIn's rule).

Raw records are fetched in batches into a local queue and processed one at a time, only when
``poll`` is about to hand one out: a message counts as delivered (and becomes committable) when
the caller receives it, never earlier. A driver that carries results to another thread (the
asyncio client) lends them instead, so that one it could not deliver is handed out again and
never committed before it arrives (:mod:`gateway.consumer.handoff`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping
from itertools import islice
from typing import Any

from confluent_kafka import Consumer, Message
from confluent_kafka.error import KeyDeserializationError, ValueDeserializationError

from gateway import tracing
from gateway.auditing import Auditor
from gateway.consumer._commits import GroupCommits
from gateway.consumer._events import EventHandler
from gateway.consumer._offsets import OffsetDriver
from gateway.consumer._queue import RecordQueue
from gateway.consumer._record_path import RecordPath
from gateway.consumer._surface import ConsumerSurface
from gateway.consumer.config import parse_consumer_config
from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.consumer.handoff import Handoff
from gateway.consumer.resolver import Resolver
from gateway.core.offsets import Progress
from gateway.core.plain_runs import ProvenBatch, drop_head
from gateway.errors import GatewayError
from gateway.librdkafka.group_offsets import group_offsets
from gateway.protocol.classify import is_plainly_plain
from gateway.protocol.records import TopicPartitionKey
from gateway.serialization import Deserializers
from gateway.store import Store, checked_stores

log = logging.getLogger(__name__)


class HybridConsumer(ConsumerSurface):
    """Drop-in for ``confluent_kafka.Consumer`` that reassembles and resolves large messages.

    The keys it owns (and their defaults) are listed in :mod:`gateway.consumer.config`; the rest
    go to librdkafka.
    """

    def __init__(
        self, config: Mapping[str, Any], stores: Mapping[str, Store] | None = None, *, auditor: Auditor | None = None
    ) -> None:
        config = dict(config)
        self._deserializers = Deserializers.pop_from(config)
        self._deserialize = bool(self._deserializers)  # read on every poll: an attribute, not a __bool__ call
        settings, conf = parse_consumer_config(config)
        if settings.on_commit is not None:
            conf["on_commit"] = self._on_commit
        self._auto_commit, self._auto_commit_s = settings.auto_commit, settings.auto_commit_s
        self.stores: dict[str, Store] = checked_stores(stores)
        self._resolver = Resolver(
            self.stores,
            workers=settings.workers,
            budget=settings.budget,
            peer_max_bytes=settings.peer_max_bytes,
            rules=settings.reference_rules,
        )
        self._auditor = auditor
        if auditor is not None:
            auditor.start()
        self._consumer: Any = Consumer(conf)  # librdkafka's stubs type fields Optional; we know better here
        self._pipeline = settings.pipeline()
        self._queue = RecordQueue(
            self._consumer, settings.batch, ReferenceFetcher(self._resolver), settings.batch_bytes
        )
        self._events = EventHandler.for_consumer(settings, conf, self._pipeline, self._queue.refs, auditor, log)
        commits = GroupCommits(group_offsets(self._consumer), self._pipeline, settings.on_commit, self._events.warnings)
        self._offsets = OffsetDriver(
            self._consumer, self._pipeline, self._queue, commits, auto_offset_store=settings.auto_offset_store
        )
        self._path = RecordPath(
            self._pipeline, self._events, self._offsets, self._queue, self.stores, keys_read=settings.peers is not None
        )
        self._spans = self._path.spans = tracing.ConsumerTelemetry(conf)  # process spans end when the app is back
        self._deferred: BaseException | None = None
        self._ready: deque[Message] = deque()  # delivered, not yet handed out (after a deserializer refused one)
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._closed = False
        self._plain_runs = auditor is None  # an audited message is counted one by one, on the full path
        self._runs_now = False  # _plain_runs unless tracing is on; looked up once per fetched batch
        self._raw: deque[Message] = self._queue.raw
        self._batch: ProvenBatch | None = None  # the fetched batch poll() hands out by count alone
        self._proven = 0  # how many of its records are still at the head of the queue
        self._handoff = Handoff(self._progress, self._end_batch)
        self._pipeline.bound_commits(self._handoff.floor)

    # -- fetching and processing -------------------------------------------------------------
    def poll(self, timeout: float = -1) -> Message | None:
        """One whole message, an error event, or ``None`` when ``timeout`` passes.

        A record that cannot become a message raises a typed :class:`~gateway.errors.GatewayError`
        carrying it in ``kafka_message``; the next ``poll`` goes on after it. With deserializers,
        a message they refuse raises confluent-kafka's ``Key/ValueDeserializationError`` carrying it.
        """
        if self._proven:  # the hottest path: the rest of a batch proven plain as a whole (never traced)
            self._proven -= 1
            head = self._raw.popleft()
            if self._auto_commit:
                self._auto_commit_when_due()
            return self._deserializers.apply(head) if self._deserialize else head
        if self._spans.held:  # the application is back: the messages it held are processed
            self._spans.release()
        if self._batch is not None:
            self._end_batch()
        if self._handoff.returned:  # what a driver handed over and got back goes first (gateway.consumer.handoff)
            return self._handoff.take_one()  # type: ignore[no-any-return]
        if self._raw and self._runs_now and self._deferred is None and not self._ready:
            plain = self._plain_head()  # the hot path: a plain record delivered by bookkeeping alone
            if plain is not None:
                if self._auto_commit:
                    self._auto_commit_when_due()
                return self._deserializers.apply(plain) if self._deserialize else plain
        if self._deferred is not None:
            exc, self._deferred = self._deferred, None
            raise exc
        msg = self._take_ready() if self._ready else self._next_whole(timeout)
        return msg if msg is None or not self._deserialize else self._deserializers.apply(msg)

    def _take_ready(self) -> Message:
        """The next message kept back after a refused one; the commits it held go with the last."""
        msg = self._ready.popleft()
        if not self._ready:
            self._handoff.release()
        return msg

    def _plain_head(self) -> Message | None:
        """The queue's head, taken out if it is plainly plain and its partition allows a run; else None."""
        raw = self._queue.raw
        head = raw[0]
        if (
            head.error() is None
            and is_plainly_plain(head.value(), head.headers())
            and self._pipeline.deliver_plain((head.topic(), head.partition()), head.offset())
        ):
            raw.popleft()
            return head  # type: ignore[no-any-return]
        return None

    def _auto_commit_when_due(self) -> None:
        if self._auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self._auto_commit_s
            self._note_handed()
            self._offsets.commit_quietly(asynchronous=True)

    def _prove_batch(self) -> Message | None:
        """A fresh batch's first record when the whole batch is proven plain; the rest then go by count."""
        batch = ProvenBatch.prove(list(self._raw), self._pipeline)
        if batch is None:
            return None
        self._batch, self._proven = batch, len(batch.records) - 1
        return self._raw.popleft()

    def _note_handed(self) -> None:
        """What poll() handed out of a proven batch is noted as delivered: before anything reads offsets."""
        if self._batch is not None:
            self._batch.note(self._pipeline, len(self._batch.records) - self._proven)

    def _progress(self) -> dict[TopicPartitionKey, Progress]:
        self._note_handed()
        return self._pipeline.progress()

    def _end_batch(self) -> None:
        """Note what was handed out and drop the proof: before anything that changes a partition's state."""
        self._note_handed()
        self._batch, self._proven = None, 0

    def _fetch(self, timeout: float) -> bool:
        """One batch into the queue; whether plain runs may be taken is decided again for it."""
        fetched = self._queue.fetch(timeout)
        self._offsets.commits.serve_results()  # on_commit runs when the consumer polls, as in confluent-kafka
        self._refresh_runs()
        return fetched

    def _refresh_runs(self) -> bool:
        """Whether plain records may go by bookkeeping alone: decided again with every fetched batch."""
        traced = self._path.traced = tracing.enabled()  # looked up with every fetch, not for every record
        self._runs_now = self._plain_runs and not traced  # a traced message gets its span on the full path
        return self._runs_now

    def _next_whole(self, timeout: float) -> Message | None:
        """The next whole message from the queue (fetching as needed), before any deserializer."""
        self._auto_commit_when_due()
        deadline: float | None = None  # computed only once the queue runs dry: the common case needs no clock
        raw = self._queue.raw
        while True:
            while raw:  # records poll()'s hot path left: they need the full path
                out = self._path.handle(raw.popleft())
                if out is not None:
                    return out
            if deadline is None and timeout is not None and timeout >= 0:
                deadline = time.monotonic() + timeout
            remaining = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            if self._fetch(remaining):
                out = (self._prove_batch() or self._plain_head()) if self._runs_now else None  # the hot path too
                if out is not None:
                    return out
            elif deadline is not None and time.monotonic() >= deadline:
                return None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to ``num_messages`` whole messages; waits ``timeout`` for the first only.

        An error raised after some messages were collected is kept and raised by the next call,
        so no collected message is lost.
        """
        if self._spans.held:  # the application is back: the messages it held are processed
            self._spans.release()
        if num_messages < 1:
            raise ValueError("num_messages must be >= 1")
        if self._handoff.returned:
            return self._handoff.take(num_messages)
        before = self._progress() if self._deserialize else None  # where commits stand, should a refusal keep some back
        out: list[Message] = []
        try:
            if self._proven:  # the rest of a batch poll() proved
                self._take_proven(out, num_messages)
            else:
                self._end_batch()  # one poll() handed out whole is noted before another batch is
                if not self._raw and self._runs_now and self._deferred is None and not self._ready:
                    out = self._fetch_proven(num_messages, timeout)
                    if out and self._deserialize:
                        self._deserializers.apply_from(out, 0, self._ready)
            if not out:
                first = self.poll(timeout)
                if first is None:
                    return out
                out.append(first)
                self._take_proven(out, num_messages)
            self._fill(out, num_messages)
        except (GatewayError, KeyDeserializationError, ValueDeserializationError) as exc:
            self._end_batch()  # what is ready or deferred goes before the rest of a proven batch
            if self._ready and before is not None:  # delivered, not received: no commit may cover them yet
                kept: list[Any] = list(self._ready)
                self._handoff.hold(before, {(m.topic(), m.partition()) for m in kept})
            if not out:
                raise
            self._deferred = exc
        return out

    def _fetch_proven(self, limit: int, timeout: float) -> list[Message]:
        """A fetched batch handed out as it came when it is proven plain; else queued for the full path.

        The list librdkafka returned is the list the caller gets: past the proof, a batch of plain
        records costs nothing per record.
        """
        self._auto_commit_when_due()
        batch = self._queue.fetch_batch(timeout, limit)
        self._offsets.commits.serve_results()
        if self._refresh_runs() and batch:
            proven = ProvenBatch.prove(batch, self._pipeline)
            if proven is not None:
                proven.note(self._pipeline, len(batch))
                return batch
        if batch:
            self._queue.enqueue(batch)
        return []

    def _take_proven(self, out: list[Message], limit: int) -> None:
        """What is left of a batch poll() proved, up to ``limit`` in ``out``, in bulk."""
        raw, taken = self._raw, len(out)
        take = min(self._proven, limit - taken)
        out.extend(islice(raw, take))
        drop_head(raw, take)
        self._proven -= take
        if not self._proven:
            self._end_batch()
        if self._deserialize:
            self._deserializers.apply_from(out, taken, self._ready)

    def _fill(self, out: list[Message], limit: int) -> None:
        """``out`` up to ``limit`` from what is ready, queued or fetched without waiting."""
        raw = self._raw
        while self._ready and len(out) < limit:
            self._hand_out(out, self._take_ready())
        while len(out) < limit:
            if not raw and not self._fetch(0):
                break
            while raw and len(out) < limit:  # straight from the queue: no per-message poll()
                taken = len(out)
                if self._runs_now and self._queue.take_plain(self._pipeline, out, limit):
                    if self._deserialize:
                        self._deserializers.apply_from(out, taken, self._ready)
                    continue
                msg = self._path.handle(raw.popleft())
                if msg is not None:
                    self._hand_out(out, msg)

    def _hand_out(self, out: list[Message], msg: Message) -> None:
        out.append(msg)
        if self._deserialize:
            self._deserializers.apply_from(out, len(out) - 1, self._ready)

    def close(self) -> None:
        if self._closed:
            return
        self._spans.release()  # the application held its last messages until now
        self._end_batch()
        if self._auto_commit:
            self._offsets.commit_quietly(asynchronous=False)
        self._closed = True
        self._runs_now = False  # what is still queued is dropped, so poll() raises as confluent-kafka's does
        self._queue.clear()
        self._ready.clear()
        self._handoff.clear()
        self._resolver.close()
        self._events.close()
        if self._auditor is not None:
            self._auditor.close()
        self._offsets.commits.close()
        self._consumer.close()

    def metrics(self) -> dict[str, int]:
        self._note_handed()
        return {
            **self._pipeline.metrics(),
            **self._events.counters,
            **self._resolver.metrics(),
            **self._offsets.commits.counters,
        }

    @property
    def handoff(self) -> Handoff:
        """For a driver carrying ``poll``/``consume`` results to another thread (:mod:`gateway.consumer.handoff`)."""
        return self._handoff

    @property
    def inner(self) -> Consumer:
        """The wrapped librdkafka consumer; reading from it directly bypasses reassembly and tracking."""
        return self._consumer  # type: ignore[no-any-return]
