"""``HybridConsumer``: a confluent-kafka ``Consumer`` that hands back whole messages.

Chunked (LinkedIn segments), reference and plain records all come out of ``poll`` as
``confluent_kafka.Message`` objects: the record that completes a message, with ``set_value`` /
``set_headers`` applied. A plain record is returned as librdkafka produced it, untouched except
for a ``_so`` header appended while a large message is pending in its partition (LinkedIn's rule).

Raw records are fetched in batches into a local queue and processed one at a time, only when
``poll`` is about to hand one out: a message counts as delivered (and becomes committable) when
the caller receives it, never earlier.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Message, TopicPartition

from gateway.assembler import MessageAssembler
from gateway.auditing import Auditor, AuditType
from gateway.config import pop_bool, pop_int
from gateway.errors import EnvelopeFormatError, GatewayError, InvalidSegmentError, LargeMessageDroppedError
from gateway.offsets import DeliveredOffsetTracker, TopicPartitionKey
from gateway.processor import RecordProcessor
from gateway.protocol.envelope import (
    ENVELOPE_HEADER,
    Envelope,
    decode_envelope,
    is_envelope_record,
    looks_like_envelope,
)
from gateway.protocol.headers import LM_HEADER
from gateway.protocol.segments import SEGMENT_HEADER_SIZE
from gateway.resolver import DEFAULT_BUDGET, DEFAULT_WORKERS, Resolver

log = logging.getLogger(__name__)

RebalanceCallback = Callable[[Any, list[TopicPartition]], None]


class HybridConsumer:
    """Drop-in for ``confluent_kafka.Consumer`` that reassembles and resolves large messages.

    Keys it owns (LinkedIn's names and defaults where LinkedIn has them):

    * ``message.assembler.buffer.capacity`` (32 000 000): chunk bytes buffered across partitions;
    * ``message.assembler.expiration.offset.gap`` (1000): drop an incomplete message once the
      partition has moved this many offsets past its first segment;
    * ``message.assembler.max.segments.per.message`` (100 000) and
      ``message.assembler.max.message.bytes`` (the buffer capacity): what one message may declare;
    * ``max.tracked.messages.per.partition`` (500): delivered messages remembered for commit/seek;
    * ``exception.on.message.dropped`` (false): raise :class:`LargeMessageDroppedError` on eviction;
    * ``enable.auto.commit`` (true) and ``auto.commit.interval.ms`` (5000): run by this wrapper,
      committing safe offsets; the inner consumer's own auto-commit is always off;
    * ``fetch.batch.records`` (500): raw records taken from librdkafka per fetch;
    * ``reference.fetch.workers`` (4) and ``reference.fetch.budget.bytes`` (64 000 000): parallel
      fetch-ahead of referenced payloads across the fetched batch;
    * ``reference.error.mode`` (``raise``): an envelope that cannot be resolved raises its typed
      error (carrying the record in ``kafka_message``); ``deliver`` returns the record with
      ``error()`` set instead. Either way the loop goes on, and commits stop at that record until
      the application commits it explicitly (``commit(message=...)``).
    """

    def __init__(
        self, config: Mapping[str, Any], stores: Mapping[str, Any] | None = None, *, auditor: Auditor | None = None
    ) -> None:
        conf = dict(config)
        capacity = pop_int(conf, "message.assembler.buffer.capacity", 32_000_000, minimum=1)
        gap = pop_int(conf, "message.assembler.expiration.offset.gap", 1000, minimum=0)
        max_segments = pop_int(conf, "message.assembler.max.segments.per.message", 100_000, minimum=1)
        max_message = pop_int(conf, "message.assembler.max.message.bytes", capacity, minimum=1)
        max_tracked = pop_int(conf, "max.tracked.messages.per.partition", 500, minimum=1)
        raise_on_drop = pop_bool(conf, "exception.on.message.dropped", False)
        self._auto_commit = pop_bool(conf, "enable.auto.commit", True)
        self._auto_commit_s = pop_int(conf, "auto.commit.interval.ms", 5000, minimum=0) / 1000.0
        self._batch = pop_int(conf, "fetch.batch.records", 500, minimum=1)
        conf.pop("treat.bad.segments.as.payload", None)  # LinkedIn's no-op key, accepted for portability
        error_mode = str(conf.pop("reference.error.mode", "raise")).lower()
        if error_mode not in ("raise", "deliver"):
            raise ValueError(f"reference.error.mode must be 'raise' or 'deliver', got {error_mode!r}")
        self._deliver_errors = error_mode == "deliver"
        workers = pop_int(conf, "reference.fetch.workers", DEFAULT_WORKERS, minimum=1)
        budget = pop_int(conf, "reference.fetch.budget.bytes", DEFAULT_BUDGET, minimum=0)
        self._user_on_commit = conf.pop("on_commit", None)
        conf["enable.auto.commit"] = False
        if self._user_on_commit is not None:
            conf["on_commit"] = self._on_commit
        self.stores: dict[str, Any] = dict(stores or {})
        self._resolver = Resolver(self.stores, workers=workers, budget=budget)
        self._auditor = auditor
        if auditor is not None:
            auditor.start()
        self._envelopes: dict[tuple[str, int, int], Envelope] = {}
        self._candidates: deque[tuple[tuple[str, int, int], Envelope]] = deque()
        self._consumer: Any = Consumer(conf)  # librdkafka's stubs type fields Optional; we know better here
        self._processor = RecordProcessor(
            MessageAssembler(
                capacity, gap, exception_on_message_dropped=raise_on_drop,
                max_segments=max_segments, max_message_bytes=max_message,
            ),
            DeliveredOffsetTracker(max_tracked),
        )
        self._raw: deque[Any] = deque()
        self._deferred: BaseException | None = None
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._closed = False
        self._plain_fast = 0  # plain records delivered by the fast path (an int: cheaper than the dict)
        self.counters: dict[str, int] = {
            "records": 0, "plain.messages": 0, "chunked.messages": 0, "segments": 0,
            "duplicates.filtered": 0, "invalid.records": 0, "dropped.evicted": 0, "dropped.expired": 0,
            "reference.messages": 0, "reference.errors": 0,
        }

    # -- fetching and processing -------------------------------------------------------------
    def poll(self, timeout: float = -1) -> Message | None:
        """One whole message, an error event, or ``None`` when ``timeout`` passes.

        A record that cannot become a message raises a typed :class:`~gateway.errors.GatewayError`
        carrying it in ``kafka_message``; the next ``poll`` goes on after it.
        """
        if self._deferred is not None:
            exc, self._deferred = self._deferred, None
            raise exc
        if self._auto_commit:
            self._maybe_auto_commit()
        deadline: float | None = None  # computed only once the queue runs dry: the common case needs no clock
        while True:
            while self._raw:
                out = self._handle(self._raw.popleft())
                if out is not None:
                    if self._auditor is not None and out.error() is None:
                        self._audit(out)
                    return out
            if deadline is None and timeout is not None and timeout >= 0:
                deadline = time.monotonic() + timeout
            remaining = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._fetch(remaining) and deadline is not None and time.monotonic() >= deadline:
                return None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to ``num_messages`` whole messages; waits ``timeout`` for the first only.

        An error raised after some messages were collected is kept and raised by the next call,
        so no collected message is lost.
        """
        if num_messages < 1:
            raise ValueError("num_messages must be >= 1")
        out: list[Message] = []
        first = self.poll(timeout)
        if first is None:
            return out
        out.append(first)
        handle, raw, audit = self._handle, self._raw, self._auditor
        try:
            while len(out) < num_messages:
                if not raw and not self._fetch(0):
                    break
                while raw and len(out) < num_messages:  # straight from the queue: no per-message poll()
                    msg = handle(raw.popleft())
                    if msg is not None:
                        if audit is not None and msg.error() is None:
                            self._audit(msg)
                        out.append(msg)
        except GatewayError as exc:
            self._deferred = exc
        return out

    def _fetch(self, timeout: float) -> bool:
        first = self._consumer.poll(timeout)
        if first is None:
            return False
        batch = [first]
        if self._batch > 1:
            batch.extend(self._consumer.consume(self._batch - 1, 0))
        self._raw.extend(batch)
        if self.stores:
            self._scan_for_envelopes(batch)
            self._schedule_prefetch()
        return True

    def _schedule_prefetch(self) -> None:
        """Start fetching the payloads of queued envelopes, in queue order, within the byte budget.

        Each fetched batch is scanned once for envelopes (:meth:`_scan_for_envelopes`), so this only
        walks the queue of candidates not yet scheduled, however often it runs.
        """
        if not self.stores:
            return
        while self._candidates:
            key, envelope = self._candidates[0]
            if key in self._envelopes and not self._resolver.prefetch(key, envelope):
                return  # over budget: resume here when a payload has been taken
            self._candidates.popleft()

    def _scan_for_envelopes(self, batch: Sequence[Any]) -> None:
        for msg in batch:
            value = msg.value()
            if msg.error() is not None or not looks_like_envelope(value):
                continue
            try:
                envelope = decode_envelope(value)
            except EnvelopeFormatError:
                continue  # reported when the record's turn comes
            key = (msg.topic(), msg.partition(), msg.offset())
            self._envelopes[key] = envelope
            self._candidates.append((key, envelope))

    def _load_commits(self, batch: Iterable[Any]) -> None:
        """Read the stored high watermark of partitions seen for the first time (one broker call for all)."""
        missing = {
            self._key(m) for m in batch if m.error() is None and self._processor.needs_commit(self._key(m))
        }
        if not missing:
            return
        try:
            committed = self._consumer.committed([TopicPartition(t, p) for t, p in missing], timeout=30)
        except KafkaException as exc:
            raise KafkaException(exc.args[0]) from exc
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else None
            self._processor.load_commit((tp.topic, tp.partition), offset, tp.metadata)

    def _handle(self, msg: Any) -> Message | None:
        if msg.error() is not None:
            return msg  # type: ignore[no-any-return]
        value = msg.value()
        headers = msg.headers()
        tp = (msg.topic(), msg.partition())
        offset = msg.offset()
        # Fast path: no _lm or envelope header, and a value that cannot be a segment (short, or a first
        # byte LinkedIn reads as a version > 0) nor an envelope (0x1b).
        if (
            (headers is None or not any(k in (LM_HEADER, ENVELOPE_HEADER) for k, _ in headers))
            and (value is None or len(value) < SEGMENT_HEADER_SIZE or (0 < value[0] < 0x80 and value[0] != 0x1B))
            and self._processor.deliver_plain(tp, offset)
        ):
            self._plain_fast += 1
            return msg  # type: ignore[no-any-return]
        self.counters["records"] += 1
        if self._processor.needs_commit(tp):  # first record of this partition: with the others queued
            self._load_commits([msg, *self._raw])
        try:
            delivery = self._processor.process(tp, offset, value, headers)
        except InvalidSegmentError as exc:
            self._processor.mark_not_a_message(tp, offset)
            self.counters["invalid.records"] += 1
            exc.kafka_message = msg
            raise
        except LargeMessageDroppedError as exc:
            self._count_dropped()
            self.counters["segments"] += 1
            exc.kafka_message = msg
            raise
        finally:
            if self._processor.assembler.dropped:
                self._count_dropped()
        if delivery is None:
            if self._processor.tracker.is_message_offset(tp, offset):
                self.counters["duplicates.filtered"] += 1
            else:
                self.counters["segments"] += 1
            self._envelopes.pop((tp[0], tp[1], offset), None)
            return None
        if not delivery.segmented and is_envelope_record(value, headers):
            return self._resolve(msg, tp, offset, value, headers, delivery.headers)
        if delivery.value is not value:
            msg.set_value(delivery.value)
        if delivery.headers is not None:
            msg.set_headers(delivery.headers)
        self.counters["chunked.messages" if delivery.segmented else "plain.messages"] += 1
        return msg  # type: ignore[no-any-return]

    def _resolve(
        self, msg: Any, tp: TopicPartitionKey, offset: int, value: bytes | None, headers: Any, rewritten: Any
    ) -> Message | None:
        """An envelope record: fetch its payload and hand back the record with the payload as value."""
        key = (tp[0], tp[1], offset)
        marked = any(k == ENVELOPE_HEADER for k, _ in headers or ())
        try:
            envelope = self._envelopes.pop(key, None) or decode_envelope(value)
        except EnvelopeFormatError as exc:
            if not marked:  # a legacy value that merely starts like an envelope: not ours, pass it on
                self.counters["plain.messages"] += 1
                if rewritten is not None:
                    msg.set_headers(rewritten)
                return msg  # type: ignore[no-any-return]
            return self._unresolved(msg, tp, offset, exc)
        try:
            payload = self._resolver.resolve(key, envelope)
        except GatewayError as exc:
            return self._unresolved(msg, tp, offset, exc)
        finally:
            self._schedule_prefetch()
        msg.set_value(payload)
        msg.set_headers([h for h in (rewritten if rewritten is not None else headers or ()) if h[0] != ENVELOPE_HEADER])
        self.counters["reference.messages"] += 1
        return msg  # type: ignore[no-any-return]

    def _unresolved(self, msg: Any, tp: TopicPartitionKey, offset: int, exc: GatewayError) -> Message | None:
        """Commits stop here until the application commits this message itself; the loop goes on."""
        self._processor.hold(tp, offset)
        self.counters["reference.errors"] += 1
        exc.kafka_message = msg
        if self._deliver_errors:
            msg.set_error(KafkaError(KafkaError._VALUE_DESERIALIZATION, f"{type(exc).__name__}: {exc}"))
            return msg  # type: ignore[no-any-return]
        raise exc

    def _audit(self, msg: Message) -> None:
        assert self._auditor is not None
        stamp = msg.timestamp()[1]
        key, value = msg.key(), msg.value()
        size = (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        self._auditor.record(msg.topic() or "", stamp if stamp > 0 else 0, 1, size, AuditType.SUCCESS)

    def _count_dropped(self) -> None:
        for dropped in self._processor.assembler.dropped:
            self.counters[f"dropped.{dropped.reason}"] = self.counters.get(f"dropped.{dropped.reason}", 0) + 1
            log.warning("incomplete large message dropped (%s): %s", dropped.reason, dropped)
        self._processor.assembler.dropped.clear()

    # -- commits -----------------------------------------------------------------------------
    def _positions(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """Where each partition really is: the first raw record not yet processed, else librdkafka's position."""
        wanted = list(tps)
        out: dict[TopicPartitionKey, int] = {}
        for msg in self._raw:
            key = self._key(msg)
            if key not in out and msg.error() is None:
                out[key] = msg.offset()
        rest = [TopicPartition(t, p) for t, p in wanted if (t, p) not in out]
        if rest:
            for tp in self._consumer.position(rest):
                out[(tp.topic, tp.partition)] = tp.offset
        return {tp: out[tp] for tp in wanted if tp in out}

    @staticmethod
    def _key(msg: Any) -> TopicPartitionKey:
        return (msg.topic(), msg.partition())

    def commit(
        self,
        message: Message | None = None,
        offsets: Sequence[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        """Commit safe offsets with LinkedIn's ``"<HW>,<metadata>"`` metadata.

        With no argument: what was delivered so far. With ``message`` or ``offsets``: those user
        offsets, translated to the offset a restart must resume from. Synchronous commits return
        the user-visible offsets, as ``committed()`` would show them.
        """
        if message is not None:
            wanted: dict[TopicPartitionKey, tuple[int, str | None]] = {
                self._key(message): (int(message.offset() or 0) + 1, "")
            }
            self._processor.release(self._key(message), int(message.offset() or 0))
            ignore_hw = True
        elif offsets is not None:
            # no metadata is "" as Kafka clients since 2.1 write it (LinkedIn's codec would say "null")
            wanted = {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in offsets}
            ignore_hw = True
        else:
            assigned = [(tp.topic, tp.partition) for tp in self._consumer.assignment()]
            positions = self._processor.current_positions(self._positions(assigned))
            wanted = {tp: (offset, "") for tp, offset in positions.items()}
            ignore_hw = False
        translated = self._processor.safe_offsets_to_commit(wanted, ignore_hw)
        if not translated:
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET, "no offsets to commit"))
        to_commit = [TopicPartition(t, p, off, metadata=meta) for (t, p), (off, meta) in translated.items()]
        result = self._consumer.commit(offsets=to_commit, asynchronous=asynchronous)
        if asynchronous:
            return None
        return self._user_view(result or to_commit)

    def _user_view(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        out = []
        for tp in partitions:
            if tp.offset < 0:
                out.append(tp)
                continue
            offset, metadata = RecordProcessor.user_view_of_commit(tp.offset, tp.metadata)
            out.append(TopicPartition(tp.topic, tp.partition, offset, metadata=metadata))
        return out

    def _on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        if self._user_on_commit is not None:
            self._user_on_commit(err, self._user_view(partitions))

    def committed(self, partitions: Sequence[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        """The user-visible committed offsets: the high watermark LinkedIn keeps in the metadata."""
        raw = self._consumer.committed(list(partitions), timeout=timeout) if timeout >= 0 else \
            self._consumer.committed(list(partitions))
        return self._user_view(raw)

    def committed_safe_offsets(self, partitions: Sequence[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        """What the broker really stores: the offset a restart resumes from."""
        if timeout >= 0:
            return list(self._consumer.committed(list(partitions), timeout=timeout))
        return list(self._consumer.committed(list(partitions)))

    def _maybe_auto_commit(self) -> None:
        if time.monotonic() < self._next_auto_commit:
            return
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._commit_quietly(asynchronous=True)

    def _commit_quietly(self, asynchronous: bool, partitions: Iterable[TopicPartitionKey] | None = None) -> None:
        try:
            if partitions is None:
                self.commit(asynchronous=asynchronous)
                return
            keys = list(partitions)
            positions = self._processor.current_positions(self._positions(keys))
            if not positions:
                return
            translated = self._processor.safe_offsets_to_commit(
                {tp: (off, "") for tp, off in positions.items()}, False
            )
            self._consumer.commit(
                offsets=[TopicPartition(t, p, o, metadata=m) for (t, p), (o, m) in translated.items()],
                asynchronous=asynchronous,
            )
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "code", lambda: None)() == KafkaError._NO_OFFSET:
                return
            log.warning("commit failed: %s", exc)
        except GatewayError as exc:  # e.g. an offset no longer tracked: nothing safe to commit
            log.warning("commit skipped: %s", exc)

    def safe_offset(self, partition: TopicPartition) -> int | None:
        """The offset a restart must resume from so that nothing delivered later is lost."""
        return self._processor.safe_offset((partition.topic, partition.partition))

    # -- positions and seeks -------------------------------------------------------------------
    def position(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        positions = self._positions(keys)
        return [TopicPartition(t, p, positions.get((t, p), OFFSET_INVALID)) for t, p in keys]

    def seek(self, partition: TopicPartition) -> None:
        """LinkedIn's seek: land on the first segment of the message at ``partition.offset``.

        Seeking back into a delivered large message re-delivers it whole; messages below the
        target are re-read but not re-delivered; below the tracked range raises
        :class:`~gateway.errors.OffsetNotTrackedError`.
        """
        key = (partition.topic, partition.partition)
        offset = partition.offset
        if offset < 0:  # OFFSET_BEGINNING / OFFSET_END / OFFSET_STORED
            self._drop_raw(key)
            self._consumer.seek(partition)
            self._processor.clear(key)
            self._processor.set_high_watermark(key, 0)
            return
        delivered = self._processor.tracker.delivered(key)
        if delivered is not None and offset == delivered + 1:
            return
        stored = self._consumer.committed([TopicPartition(*key)], timeout=30)[0]
        view = None
        if stored.offset >= 0:
            view = RecordProcessor.user_view_of_commit(stored.offset, stored.metadata)[0]
        plan = self._processor.plan_seek(key, offset, view)
        target, high_watermark = plan.target, plan.high_watermark
        if plan.to_committed:
            target = stored.offset
            high_watermark = view if view is not None else stored.offset
        self._drop_raw(key)
        self._consumer.seek(TopicPartition(key[0], key[1], target))
        self._processor.clear(key)
        self._processor.load_commit(key, stored.offset if stored.offset >= 0 else None, stored.metadata)
        self._processor.set_high_watermark(key, high_watermark)

    # -- membership ----------------------------------------------------------------------------
    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        def assigned(_: Any, partitions: list[TopicPartition]) -> None:
            if on_assign is not None:
                on_assign(self, partitions)

        def revoked(_: Any, partitions: list[TopicPartition]) -> None:
            keys = [(tp.topic, tp.partition) for tp in partitions]
            try:
                if on_revoke is not None:
                    on_revoke(self, partitions)
            finally:  # a failing user callback must not leave stale state behind
                if self._auto_commit and keys:
                    self._commit_quietly(asynchronous=False, partitions=keys)
                self._forget(keys)

        def lost(_: Any, partitions: list[TopicPartition]) -> None:
            callback = on_lost if on_lost is not None else on_revoke
            try:
                if callback is not None:
                    callback(self, partitions)
            finally:
                self._forget([(tp.topic, tp.partition) for tp in partitions])

        self._consumer.subscribe(list(topics), on_assign=assigned, on_revoke=revoked, on_lost=lost)

    def _forget(self, keys: Sequence[TopicPartitionKey]) -> None:
        """Partitions leave: their buffered records and state go; every HW is re-read from Kafka."""
        for key in keys:
            self._drop_raw(key)
            self._processor.clear(key)
        self._processor.clear_high_watermarks()

    def _drop_raw(self, key: TopicPartitionKey) -> None:
        if self._raw:
            self._raw = deque(m for m in self._raw if self._key(m) != key)
        self._resolver.discard(lambda k: (k[0], k[1]) != key)  # type: ignore[index]
        for stale in [k for k in self._envelopes if (k[0], k[1]) == key]:
            del self._envelopes[stale]
        if self._candidates:
            self._candidates = deque(c for c in self._candidates if (c[0][0], c[0][1]) != key)

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        keep = {(tp.topic, tp.partition) for tp in partitions}
        stale = [tp for tp in self._processor.tracker.partitions() if tp not in keep]
        stale += [self._key(m) for m in self._raw if self._key(m) not in keep]
        for key in set(stale):
            self._drop_raw(key)
            self._processor.clear(key)
        for tp in partitions:  # an explicit offset is a seek: forget what was known, deliver from there
            if tp.offset >= 0 or tp.offset in (-1, -2):
                key = (tp.topic, tp.partition)
                self._drop_raw(key)
                self._processor.clear(key)
                self._processor.set_high_watermark(key, max(tp.offset, 0))
        self._consumer.assign(list(partitions))

    def unassign(self) -> None:
        self._consumer.unassign()
        self._reset_all()

    def unsubscribe(self) -> None:
        if self._auto_commit:
            self._commit_quietly(asynchronous=False)
        self._consumer.unsubscribe()
        self._reset_all()

    def _reset_all(self) -> None:
        self._raw.clear()
        self._resolver.discard(lambda _: False)
        self._envelopes.clear()
        self._candidates.clear()
        self._processor.assembler.clear()
        self._processor.tracker.clear()
        self._processor.clear_high_watermarks()

    def close(self) -> None:
        if self._closed:
            return
        if self._auto_commit:
            self._commit_quietly(asynchronous=False)
        self._closed = True
        self._resolver.close()
        if self._auditor is not None:
            self._auditor.close()
        self._consumer.close()

    # -- pass-through ----------------------------------------------------------------------------
    def assignment(self) -> list[TopicPartition]:
        return list(self._consumer.assignment())

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        self._consumer.pause(list(partitions))

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        self._consumer.resume(list(partitions))

    def get_watermark_offsets(self, partition: TopicPartition, *args: Any, **kwargs: Any) -> Any:
        return self._consumer.get_watermark_offsets(partition, *args, **kwargs)

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        return self._consumer.list_topics(*args, **kwargs)

    def memberid(self) -> Any:
        return self._consumer.memberid()

    def metrics(self) -> dict[str, int]:
        out = dict(self.counters)
        out["records"] += self._plain_fast
        out["plain.messages"] += self._plain_fast
        out["assembler.buffered.bytes"] = self._processor.assembler.buffered_bytes
        out["assembler.incomplete.messages"] = self._processor.assembler.incomplete_count
        out.update({f"resolver.{k}": v for k, v in self._resolver.counters.items()})
        out["resolver.ahead.bytes"] = self._resolver.ahead_bytes
        return out

    @property
    def inner(self) -> Consumer:
        """The wrapped librdkafka consumer; reading from it directly bypasses reassembly and tracking."""
        return self._consumer  # type: ignore[no-any-return]
