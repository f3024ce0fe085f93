"""``HybridProducer``: a confluent-kafka ``Producer`` that sends values of any size.

Per message, a policy picks the route. Plain records go straight to librdkafka with the caller's
arguments untouched. Chunked messages become LinkedIn segments that share key, partition and
timestamp; their per-segment delivery reports are folded into one ``on_delivery`` call per
logical message. Reference messages are written to a store first and removed again if Kafka
refuses the envelope.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from gateway.auditing import Auditor, AuditType
from gateway.config import peek_int, pop_bool, pop_int
from gateway.errors import ConfigurationError, LargeMessageSendError, StoreError, StoreUnavailableError
from gateway.health import StoreHealth
from gateway.policy import CHUNKED, PLAIN, MessageInfo, Policy, Route, RouteKind, SizeThresholdPolicy
from gateway.protocol.envelope import Envelope, encode_envelope, envelope_header
from gateway.protocol.headers import TIMESTAMP_HEADER, Headers, encode_timestamp, has_header
from gateway.protocol.records import OutRecord
from gateway.protocol.segments import SEGMENT_HEADER_SIZE
from gateway.protocol.splitter import split

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[Any, Any], None]

DEFAULT_SEGMENT_BYTES = 800_000
RECORD_OVERHEAD = 512
"""Room kept below ``message.max.bytes`` for librdkafka's per-record framing and the batch header."""


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"value must be bytes or str, got {type(value).__name__}")


def _headers_list(headers: Any) -> Headers:
    if headers is None:
        return []
    items = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    return [(str(k), _as_bytes(v)) for k, v in items]


def _headers_size(headers: Sequence[tuple[str, bytes | None]]) -> int:
    return sum(len(k) + (len(v) if v is not None else 0) + 10 for k, v in headers)


@dataclass
class _LogicalMessage:
    """Folds n segment delivery reports into one (``LargeMessageCallback``)."""

    total: int
    on_delivery: DeliveryCallback | None
    value: bytes | None
    key: Any
    headers: Headers
    acked: int = 0
    failed: int = 0
    first_error: Any = None
    silent: bool = False


class HybridProducer:
    """Drop-in for ``confluent_kafka.Producer`` with per-message routing.

    Keys it owns (popped before librdkafka sees the config):

    * ``max.message.segment.bytes`` (800 000): chunk size; capped so that a segment, its 33-byte
      header, key and headers stay under ``message.max.bytes``;
    * ``li.record.header.enable`` (false): write LinkedIn's header-only (H3) segments;
    * ``header.timestamp.enabled`` (true): stamp ``_t`` on every segment of a chunked message
      (LinkedIn stamps every record; plain records are left exactly as given here);
    * ``li.large.message.segment.wrapping.required`` (false): wrap values that fit as one segment;
    * ``large.message.block.ms`` (60 000): how long a chunked or reference ``produce`` waits for
      queue space (the reference route has already written its payload, so it waits too);
    * ``reference.fallback.inline.max.bytes`` (16 000 000), ``store.failure.threshold`` (3),
      ``store.failure.window.ms`` (30 000), ``store.probe.interval.ms`` (5 000): store health and
      fallback, see ``docs/policy.md``. The fallback cap stays below the consumer's default buffer
      capacity (32 MB), since a chunked message larger than the consumer's buffer cannot be assembled.

    ``on_delivery(err, msg)`` is called once per logical message with the message's last record,
    whose value, key and headers are set back to what the caller passed in.

    A full local queue never leaves a chunked message half-queued without saying so: ``produce``
    serves delivery reports and retries until ``large.message.block.ms``; if the *first*
    segment cannot be queued it raises ``BufferError`` (nothing was queued); if a later one
    cannot, it raises :class:`LargeMessageSendError` naming how many segments went out, and the
    logical message's ``on_delivery`` is not called. Plain records keep librdkafka's behaviour
    (``BufferError`` at once).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        policy: Policy | None = None,
        stores: Mapping[str, Any] | None = None,
        *,
        auditor: Auditor | None = None,
    ) -> None:
        conf = dict(config)
        segment_bytes = pop_int(conf, "max.message.segment.bytes", DEFAULT_SEGMENT_BYTES, minimum=1)
        self._header_only = pop_bool(conf, "li.record.header.enable", False)
        self._timestamp_header = pop_bool(conf, "header.timestamp.enabled", True)
        self._wrap_small = pop_bool(conf, "li.large.message.segment.wrapping.required", False)
        self._block_s = pop_int(conf, "large.message.block.ms", 60_000, minimum=0) / 1000.0
        self._max_message_bytes = peek_int(conf, "message.max.bytes", 1_000_000)
        self._fallback_cap = pop_int(conf, "reference.fallback.inline.max.bytes", 16_000_000, minimum=0)
        self._health_settings = (
            pop_int(conf, "store.failure.threshold", 3, minimum=1),
            pop_int(conf, "store.failure.window.ms", 30_000, minimum=1),
            pop_int(conf, "store.probe.interval.ms", 5_000, minimum=0),
        )
        overhead = (0 if self._header_only else SEGMENT_HEADER_SIZE) + RECORD_OVERHEAD
        if self._max_message_bytes - overhead < 1:
            raise ValueError(f"message.max.bytes={self._max_message_bytes} leaves no room for a segment")
        self.segment_bytes = min(segment_bytes, self._max_message_bytes - overhead)
        self._overhead = overhead
        self.policy: Policy = policy if policy is not None else SizeThresholdPolicy()
        self.stores: dict[str, Any] = dict(stores or {})
        named = getattr(self.policy, "store_names", None)
        missing = sorted(set(named()) - set(self.stores)) if callable(named) else []
        if missing:
            raise ConfigurationError(f"the policy routes to {missing}, but stores= has {sorted(self.stores) or 'none'}")
        limit = getattr(self.policy, "always_plain_up_to", None)
        self._plain_up_to: int = limit(self.segment_bytes) if callable(limit) else -1
        threshold, window, probe = self._health_settings
        self.health: dict[str, StoreHealth] = {
            name: StoreHealth(threshold, window, probe) for name in self.stores
        }
        self._auditor = auditor
        if auditor is not None:
            auditor.start()
        self._producer = Producer(conf)
        self._lock = threading.Lock()
        self._messages_in_flight = 0
        self._segments_in_flight = 0
        self.counters: dict[str, int] = {
            "plain.messages": 0, "plain.bytes": 0, "plain.kafka.bytes": 0,
            "chunked.messages": 0, "chunked.bytes": 0, "chunked.segments": 0, "chunked.kafka.bytes": 0,
            "reference.messages": 0, "reference.bytes": 0, "reference.kafka.bytes": 0,
            "delivery.failures": 0, "rollbacks": 0, "rollback.failures": 0, "store.put.ms": 0, "store.puts": 0,
            "store.put.failures": 0, "fallbacks": 0, "fallback.refused": 0,
        }
        self._acked: list[tuple[Any, str]] = []

    # -- routing ---------------------------------------------------------------------------
    def _segment_size_for(self, key: bytes | None, headers: Headers) -> int:
        room = self._max_message_bytes - self._overhead - (len(key) if key else 16) - _headers_size(headers)
        return max(1, min(self.segment_bytes, room))

    def route_for(self, topic: str, size: int, key: Any = None, headers: Any = None) -> Route:
        """The route ``produce`` will take for a value of ``size`` bytes (the policy's answer)."""
        if size <= self._plain_up_to and not self._wrap_small:
            return PLAIN  # the policy says plain for any topic at this size: not consulted per message
        if self._wrap_small and 0 < size <= self.segment_bytes:
            return CHUNKED
        key_bytes = _as_bytes(key)
        hdrs = _headers_list(headers)
        return self.policy.route(MessageInfo(topic, key_bytes, size, hdrs, self._segment_size_for(key_bytes, hdrs)))

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Any = None,
        *,
        route: Route | str | None = None,
        callback: DeliveryCallback | None = None,
    ) -> None:
        """``Producer.produce`` plus ``route=`` to force a route for this one message."""
        on_delivery = on_delivery or callback
        raw = _as_bytes(value)
        size = 0 if raw is None else len(raw)
        forced = route is not None
        if route is None:
            chosen = self.route_for(topic, size, key, headers)
        else:
            chosen = Route.parse(route) if isinstance(route, str) else route
        if self._auditor is not None:
            # stamp the record ourselves, so producer and consumer audit the same time bucket
            timestamp = timestamp if timestamp > 0 else int(time.time() * 1000)
            key_size = len(key) if isinstance(key, (bytes, str)) else 0
            self._auditor.record(topic, timestamp, 1, key_size + size, AuditType.ATTEMPT)
            on_delivery = self._audited(topic, timestamp, key_size + size, on_delivery)
        try:
            if chosen.kind is RouteKind.PLAIN:
                self._produce_plain(topic, value, key, partition, on_delivery, timestamp, headers, size)
            elif chosen.kind is RouteKind.CHUNKED or self._reference_or_fallback(
                chosen, forced, topic, raw, key, partition, on_delivery, timestamp, headers
            ):
                self._produce_chunked(topic, raw, key, partition, on_delivery, timestamp, headers)
        except BaseException:
            if self._auditor is not None:
                self._auditor.record(topic, timestamp or int(time.time() * 1000), 1, size, AuditType.FAILURE)
            raise

    def _audited(
        self, topic: str, timestamp: int, size: int, on_delivery: DeliveryCallback | None
    ) -> DeliveryCallback:
        auditor = self._auditor
        assert auditor is not None

        def report(err: Any, msg: Any) -> None:
            auditor.record(topic, timestamp, 1, size, AuditType.FAILURE if err is not None else AuditType.SUCCESS)
            if on_delivery is not None:
                on_delivery(err, msg)

        return report

    def _reference_or_fallback(
        self, route: Route, forced: bool, topic: str, value: bytes | None, key: Any, partition: int,
        on_delivery: DeliveryCallback | None, timestamp: int, headers: Any,
    ) -> bool:
        """Send by reference; True when the message must be chunked instead because the store is failing.

        A store the policy chose but that keeps failing is skipped (one probe per interval) and the
        message is chunked if it is under ``reference.fallback.inline.max.bytes``; larger ones, and
        messages whose route was forced, fail fast with :class:`StoreUnavailableError`.
        """
        name = route.store or ""
        if name not in self.stores:
            raise ConfigurationError(
                f"the route names store {name!r}, but this producer has {sorted(self.stores) or 'no stores'}"
            )
        health = self.health.get(name)
        now = int(time.time() * 1000)
        if health is not None and not health.allow(now):
            return self._fallback(name, forced, value, "is marked unhealthy")
        try:
            self._produce_reference(route, topic, value, key, partition, on_delivery, timestamp, headers)
        except StoreError as exc:
            self.counters["store.put.failures"] += 1
            if health is not None:
                health.failure(int(time.time() * 1000))
            if isinstance(exc, StoreUnavailableError) or isinstance(exc.__cause__, OSError):
                return self._fallback(name, forced, value, f"failed: {exc}", exc)
            raise
        return False

    def _fallback(self, name: str, forced: bool, value: bytes | None, why: str,
                  cause: BaseException | None = None) -> bool:
        size = 0 if value is None else len(value)
        if forced or size > self._fallback_cap:
            self.counters["fallback.refused"] += 1
            reason = "the route was forced" if forced else \
                f"{size} bytes exceed reference.fallback.inline.max.bytes={self._fallback_cap}"
            raise StoreUnavailableError(f"store {name!r} {why}; not chunking instead because {reason}") from cause
        self.counters["fallbacks"] += 1
        return True

    def _produce_plain(
        self, topic: str, value: Any, key: Any, partition: int, on_delivery: DeliveryCallback | None,
        timestamp: int, headers: Any, size: int,
    ) -> None:
        kwargs: dict[str, Any] = {"partition": partition, "timestamp": timestamp}
        if value is not None:
            kwargs["value"] = value
        if key is not None:
            kwargs["key"] = key
        if headers is not None:
            kwargs["headers"] = headers
        if on_delivery is not None:
            kwargs["on_delivery"] = on_delivery
        self._producer.produce(topic, **kwargs)
        self.counters["plain.messages"] += 1
        self.counters["plain.bytes"] += size
        self.counters["plain.kafka.bytes"] += size + (len(key) if isinstance(key, (bytes, str)) else 0)

    # -- chunked route ---------------------------------------------------------------------
    def _produce_chunked(
        self, topic: str, value: bytes | None, key: Any, partition: int,
        on_delivery: DeliveryCallback | None, timestamp: int, headers: Any,
    ) -> None:
        key_bytes = _as_bytes(key)
        user_headers = _headers_list(headers)
        hdrs = list(user_headers)
        ts = timestamp if timestamp > 0 else int(time.time() * 1000)
        if self._timestamp_header and not has_header(hdrs, TIMESTAMP_HEADER):
            hdrs.append((TIMESTAMP_HEADER, encode_timestamp(ts)))
        segment_size = self._segment_size_for(key_bytes, hdrs)
        if self._wrap_small and value is not None and len(value) <= segment_size:
            segment_size = max(1, len(value))
        records = split(
            topic, partition if partition >= 0 else None, ts, uuid.uuid4(), key_bytes, value,
            segment_size, hdrs, header_only=self._header_only,
        )
        logical = _LogicalMessage(len(records), on_delivery, value, key, user_headers)
        with self._lock:
            self._messages_in_flight += 1
            self._segments_in_flight += len(records)
        sent = 0
        try:
            for record in records:
                self._produce_segment(record, logical)
                sent += 1
        except BaseException as exc:
            self._abandon(logical, sent)
            if sent == 0:
                raise
            raise LargeMessageSendError(
                f"Error when sending large message. Queued {sent} of {len(records)} segments; "
                "consumers will expire the partial message.",
                exc, sent, len(records),
            ) from exc
        self.counters["chunked.messages"] += 1
        self.counters["chunked.bytes"] += 0 if value is None else len(value)
        self.counters["chunked.segments"] += len(records)
        self.counters["chunked.kafka.bytes"] += sum(len(r.value or b"") + len(r.key or b"") for r in records)

    def _produce_segment(self, record: OutRecord, logical: _LogicalMessage) -> None:
        value = record.value if record.value is None or isinstance(record.value, bytes) else bytes(record.value)
        key = record.key if record.key is None or isinstance(record.key, bytes) else bytes(record.key)
        kwargs: dict[str, Any] = {
            "value": value,
            "key": key,
            "partition": -1 if record.partition is None else record.partition,
            "timestamp": record.timestamp or 0,
            "headers": record.headers,
            "on_delivery": lambda err, msg: self._segment_delivered(logical, err, msg),
        }
        deadline = time.monotonic() + self._block_s
        while True:
            try:
                self._producer.produce(record.topic, **kwargs)
                return
            except BufferError:
                if time.monotonic() >= deadline:
                    raise
                self._producer.poll(0.05)

    def _abandon(self, logical: _LogicalMessage, sent: int) -> None:
        """The caller gets an exception instead of a callback; count down what will never be acked."""
        with self._lock:
            self._segments_in_flight -= logical.total - sent
            logical.total = sent
            logical.silent = True
            done = sent == 0 or logical.acked + logical.failed >= sent
            if done:
                self._messages_in_flight -= 1

    def _segment_delivered(self, logical: _LogicalMessage, err: Any, msg: Any) -> None:
        with self._lock:
            self._segments_in_flight -= 1
            if err is not None:
                logical.failed += 1
                if logical.first_error is None:
                    logical.first_error = err
            else:
                logical.acked += 1
            complete = logical.acked + logical.failed >= logical.total
            if complete:
                self._messages_in_flight -= 1
        if complete:
            self._deliver(logical, msg)

    def _deliver(self, logical: _LogicalMessage, msg: Any) -> None:
        if logical.silent or logical.on_delivery is None:
            if logical.failed:
                self.counters["delivery.failures"] += 1
            return
        error: Any = None
        if logical.failed:
            self.counters["delivery.failures"] += 1
            error = LargeMessageSendError(
                f"Error when sending large message. Sent {logical.acked} of {logical.total} segments.",
                logical.first_error, logical.acked, logical.total,
            )
        if msg is not None:
            msg.set_value(logical.value)
            msg.set_key(logical.key)
            msg.set_headers(logical.headers)
        logical.on_delivery(error, msg)

    # -- reference route -------------------------------------------------------------------
    def _produce_reference(
        self, route: Route, topic: str, value: bytes | None, key: Any, partition: int,
        on_delivery: DeliveryCallback | None, timestamp: int, headers: Any,
    ) -> None:
        """Store write, then envelope produce; any failure after the write deletes the payload again.

        The write is journalled as pending (atomically with it, or before it) and the mark is cleared
        only once Kafka acknowledged the envelope, so a crash in between, or a rollback that itself
        fails, leaves something ``gateway gc`` can find.
        """
        name = route.store or ""
        store = self.stores.get(name)
        if store is None:
            raise StoreUnavailableError(f"no store named {name!r} is configured on this producer")
        payload = value if value is not None else b""
        message_id = uuid.uuid4()
        digest = hashlib.sha256(payload).digest()
        started = time.perf_counter()
        locator = store.put(topic, message_id, payload, pending_since_ms=int(time.time() * 1000), sha256=digest)
        self.counters["store.put.ms"] += int((time.perf_counter() - started) * 1000)
        self.counters["store.puts"] += 1
        health = self.health.get(name)
        if health is not None:
            health.success(int(time.time() * 1000))
        envelope = encode_envelope(Envelope(name, locator, len(payload), digest, message_id))
        user_headers = _headers_list(headers)
        record_headers = [*user_headers, envelope_header()]

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self._after_ack(store, locator)
            else:
                self.counters["delivery.failures"] += 1
                self._rollback(store, locator, err)
            if on_delivery is not None:
                if msg is not None:
                    msg.set_value(value)
                    msg.set_headers(user_headers)
                on_delivery(err, msg)

        kwargs: dict[str, Any] = {"value": envelope, "partition": partition, "timestamp": timestamp,
                                  "headers": record_headers, "on_delivery": delivered}
        if key is not None:
            kwargs["key"] = key
        deadline = time.monotonic() + self._block_s
        try:
            while True:
                try:
                    self._producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    if time.monotonic() >= deadline:
                        raise
                    self._producer.poll(0.05)
        except BaseException as exc:
            self._rollback(store, locator, exc)
            raise
        self.counters["reference.messages"] += 1
        self.counters["reference.bytes"] += len(payload)
        kafka_bytes = len(envelope) + (len(key) if isinstance(key, (bytes, str)) else 0)
        self.counters["reference.kafka.bytes"] += kafka_bytes
        per_store = f"reference.{name}.kafka.bytes"
        self.counters[per_store] = self.counters.get(per_store, 0) + kafka_bytes

    def _after_ack(self, store: Any, locator: str) -> None:
        """Queue the pending mark for clearing: cleared in one call per store when poll/flush returns.

        Batching keeps the reference route at about one store round trip per message. The window in
        which a crash leaves a mark on a landed payload stays one ``poll`` call long, and
        ``gateway gc --bootstrap`` keeps such payloads.
        """
        self._acked.append((store, locator))
        if len(self._acked) >= 512:
            self._clear_acked_marks()

    def _rollback(self, store: Any, locator: str, cause: Any) -> None:
        self.counters["rollbacks"] += 1
        try:
            store.delete(locator)
        except Exception as exc:  # the pending mark stays, so gc will remove it
            self.counters["rollback.failures"] += 1
            log.warning("rollback of %s after %s failed, left for gateway gc: %s", locator, cause, exc)

    def _clear_acked_marks(self) -> None:
        if not self._acked:
            return
        batches: dict[int, tuple[Any, list[str]]] = {}
        for store, locator in self._acked:
            batches.setdefault(id(store), (store, []))[1].append(locator)
        still: list[tuple[Any, str]] = []
        for store, locators in batches.values():
            try:
                many = getattr(store, "clear_pending_many", None)
                if many is not None:
                    many(locators)
                else:
                    for locator in locators:
                        store.clear_pending(locator)
            except Exception as exc:  # the payloads are live: keep the marks queued, never let gc guess
                log.warning("could not clear %d pending marks (will retry): %s", len(locators), exc)
                still.extend((store, locator) for locator in locators)
        self._acked = still

    # -- Producer surface ------------------------------------------------------------------
    def poll(self, timeout: float = 0) -> int:
        served = int(self._producer.poll(timeout))
        self._clear_acked_marks()
        return served

    def flush(self, timeout: float = -1) -> int:
        """Wait for delivery reports; returns the *logical* messages still in flight."""
        if timeout is None or timeout < 0:
            self._producer.flush()
        else:
            self._producer.flush(timeout)
        self._clear_acked_marks()
        return len(self)

    def __len__(self) -> int:
        with self._lock:
            return max(0, len(self._producer) - self._segments_in_flight + self._messages_in_flight)

    def metrics(self) -> dict[str, int]:
        out = dict(self.counters)
        for name, health in self.health.items():
            out[f"store.{name}.healthy"] = int(health.healthy)
        return out

    def close(self, timeout: float = -1) -> int:
        """Flush, then close the auditor (which may publish its last counts); returns messages left."""
        left = self.flush(timeout)
        if self._auditor is not None:
            self._auditor.close()
            self._producer.flush(10 if timeout < 0 else timeout)
        return left

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        return self._producer.list_topics(*args, **kwargs)

    def purge(self, *args: Any, **kwargs: Any) -> None:
        self._producer.purge(*args, **kwargs)

    @property
    def inner(self) -> Producer:
        """The wrapped librdkafka producer, for what this wrapper does not expose."""
        return self._producer


__all__ = ["HybridProducer", "KafkaError", "KafkaException"]
