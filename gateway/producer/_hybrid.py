"""``HybridProducer``: a confluent-kafka ``Producer`` that sends values of any size.

Per message, a policy picks the route. Plain records go straight to librdkafka with the caller's
arguments untouched. Chunked messages become LinkedIn segments that share key, partition and
timestamp; their per-segment delivery reports are folded into one ``on_delivery`` call per
logical message (:mod:`gateway.producer._delivery`). Reference messages are written to a store first and
removed again if Kafka refuses the envelope (:mod:`gateway.producer.reference.writer`). This class only
drives them (:mod:`gateway.producer._chunked_writer` for segments, :mod:`gateway.producer._queue_full` for the wait
for queue room they share): it owns the librdkafka producer, the auditing and tracing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from gateway import tracing
from gateway.auditing import Auditor, AuditType
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.errors import ConfigurationError
from gateway.histogram import HistogramSnapshot
from gateway.librdkafka.group_offsets import ExactProducer
from gateway.policy import Policy, Route, RouteKind, SizeThresholdPolicy
from gateway.producer._chunked_writer import ChunkedWriter
from gateway.producer._compaction import AdminDescriber, CleanupPolicies, CompactionGuard
from gateway.producer._config import parse_producer_config
from gateway.producer._metrics import ProducerMetrics
from gateway.producer._queue_full import BlockingSend
from gateway.producer._route_choice import RouteChooser
from gateway.producer._surface import CLOSED, ProducerSurface, ProducerTransactions
from gateway.producer.outgoing import DeliveryCallback, OutgoingMessage, accepted_as_is, as_bytes, headers_list
from gateway.producer.reference.window import InOrderProducer, WriteWindow
from gateway.producer.reference.writer import ReferenceWriter
from gateway.serialization import Serializers
from gateway.store import Store, checked_stores


class HybridProducer(ProducerSurface, ProducerTransactions):
    """Drop-in for ``confluent_kafka.Producer`` with per-message routing.

    Keys it owns (popped before librdkafka sees the config, see :mod:`gateway.producer._config`):

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

    ``clock`` is where every reading of the time comes from (record timestamps, store health,
    queue-full deadlines), so tests can drive it.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        policy: Policy | None = None,
        stores: Mapping[str, Store] | None = None,
        *,
        auditor: Auditor | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        config = dict(config)
        self._serializers = Serializers.pop_from(config)
        self.settings, conf = parse_producer_config(config)
        self.segment_bytes = self.settings.segment_bytes
        self.policy: Policy = policy if policy is not None else SizeThresholdPolicy()
        self.stores: dict[str, Store] = checked_stores(stores)
        named = getattr(self.policy, "store_names", None)
        missing = sorted(set(named()) - set(self.stores)) if callable(named) else []
        if missing:
            raise ConfigurationError(f"the policy routes to {missing}, but stores= has {sorted(self.stores) or 'none'}")
        self._plain_direct = not self._serializers and auditor is None and not self.settings.wrap_small
        """Whether a small plain record may skip the general path (see :meth:`_produce_direct`)."""
        self.health = {name: self.settings.store_health() for name in self.stores}
        self._clock = clock
        self._auditor = auditor
        if auditor is not None:
            auditor.start()
        window = WriteWindow(self.settings.write_window, self.stores, self.settings.write_linger_s)
        self._producer = InOrderProducer(conf, window) if window.size > 1 else ExactProducer(conf)
        """With a write window, the producer that sends the writes in flight ahead of every other record."""
        policies = (
            CleanupPolicies(AdminDescriber(conf, connect_now=True), clock, self.settings.topic_config_refresh_s)
            if self.settings.compaction_check
            else None
        )
        self._compaction = CompactionGuard(policies, self.policy, self.stores, self.segment_bytes)
        self._routes = RouteChooser(self.settings, self.policy, self._compaction)
        self._plain_up_to = self._routes.plain_up_to
        self._closed = False
        self._metrics = ProducerMetrics()
        send = BlockingSend(self._producer, clock, self.settings.block_s)
        self._chunks = ChunkedWriter(self.settings, send, metrics=self._metrics, clock=clock)
        self._references = ReferenceWriter(
            self.stores,
            self.health,
            send,
            fallback_cap=self.settings.fallback_cap,
            metrics=self._metrics,
            clock=clock,
            checksum=self.settings.checksum,
            compression=self.settings.compression,
            window=window,
            send_chunked=self._chunks.send,
        )

    def route_for(self, topic: str, size: int, key: Any = None, headers: Any = None) -> Route:
        """The route ``produce`` will take for a value of ``size`` bytes (the policy's answer)."""
        return self._routes.route(topic, size, as_bytes(key, "key"), headers_list(headers))

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
        if self._closed:  # before any store write: a closed producer could not send its envelope
            raise RuntimeError(CLOSED)
        if (
            type(value) is bytes
            and len(value) <= self._plain_up_to
            and route is None
            and headers is None
            and self._plain_direct
            and self._produce_direct(topic, value, key, partition, on_delivery or callback, timestamp)
        ):
            return
        if self._serializers:  # the whole value, before the policy sees its size
            key, value = self._serializers.serialize(topic, key, value, headers)
        message = OutgoingMessage.of(topic, value, key, partition, on_delivery or callback, timestamp, headers)
        self._produce_routed(message, self._routes.of(message) if route is None else _forced(route), route is not None)

    def _produce_routed(self, message: OutgoingMessage, chosen: Route, forced: bool) -> None:
        """The general path: compaction's terms, auditing and tracing around the chosen route's writer."""
        topic = message.topic
        terms = self._compaction.terms(topic, message.size, chosen)  # raises for chunks compaction would lose
        auditor = self._auditor
        if auditor is not None:
            # stamp the record ourselves, so producer and consumer audit the same time bucket
            message = message.stamped(self._clock.wall_ms)
            auditor.record(topic, message.timestamp, 1, message.key_size + message.size, AuditType.ATTEMPT)
            message = message.with_callback(_audited(auditor, message))
        span = tracing.start_produce(message)  # None without the otel extra
        if span is not None:
            message, segments_before = span.message, self._metrics.chunked_segments
        try:
            if chosen.kind is RouteKind.REFERENCE:  # sent by reference, or chunked where the store is down
                no_fallback = forced or terms.no_chunks
                chosen = self._references.send(chosen, no_fallback, message, persistent=terms.persistent)
            elif chosen.kind is RouteKind.PLAIN:
                self._produce_plain(message)
            elif chosen.kind is RouteKind.CHUNKED:
                self._chunks.send(message)
        except BaseException as exc:
            if auditor is not None:
                auditor.record(topic, message.timestamp, 1, message.size, AuditType.FAILURE)
            if span is not None:
                span.failed(exc)
            raise
        if span is not None:
            segments = self._metrics.chunked_segments - segments_before if chosen.kind is RouteKind.CHUNKED else 1
            span.routed(chosen.kind.value, chosen.store, segments)

    def _produce_direct(
        self, topic: Any, value: bytes, key: Any, partition: Any, on_delivery: Any, timestamp: Any
    ) -> bool:
        """A small plain record straight to librdkafka, as :meth:`produce` would send it; False: the general path.

        The size alone decides the route here (the policy answers plain for any topic below
        ``always_plain_up_to``), so only the arguments are checked (:func:`accepted_as_is`); anything
        else, an invalid argument included, takes the general path, which raises what it always
        raised. Most records are small and plain, and the general path's checks and message object
        cost several times librdkafka's own ``produce`` for them.
        """
        if (
            not accepted_as_is(topic, key, partition, timestamp, on_delivery)
            or tracing.enabled()  # a traced record gets its span on the general path
        ):
            return False
        if on_delivery is not None:
            self._producer.produce(topic, value, key, partition, on_delivery=on_delivery, timestamp=timestamp)
        elif timestamp:
            self._producer.produce(topic, value, key, partition, timestamp=timestamp)
        else:  # the common case; positional arguments are the cheapest call into confluent-kafka
            self._producer.produce(topic, value, key, partition)
        self._metrics.plain_record(len(value), 0 if key is None else len(key))
        return True

    def _produce_plain(self, message: OutgoingMessage) -> None:
        """One record with the caller's own arguments; a full queue raises at once, as librdkafka does."""
        kwargs: dict[str, Any] = {"partition": message.partition, "timestamp": message.timestamp}
        optional = {
            "value": message.value,
            "key": message.key,
            "headers": message.headers,
            "on_delivery": message.on_delivery,
        }
        kwargs.update((name, arg) for name, arg in optional.items() if arg is not None)
        self._producer.produce(message.topic, **kwargs)
        self._metrics.plain(message)

    # -- Producer surface ------------------------------------------------------------------
    def poll(self, timeout: float = 0) -> int:
        served = int(self._producer.poll(timeout))
        self._references.clear_acked_marks()
        return served

    def flush(self, timeout: float = -1) -> int:
        """Wait for delivery reports; returns the *logical* messages still in flight."""
        if timeout is None or timeout < 0:
            self._producer.flush()
        else:
            self._producer.flush(timeout)
        self._references.clear_acked_marks()
        return len(self)

    def __len__(self) -> int:
        return self._chunks.in_flight.logical(lambda: len(self._producer)) + int(self._references.in_flight)

    def metrics(self) -> dict[str, int]:
        out = self._metrics.snapshot()
        for name, health in self.health.items():
            out[f"store.{name}.healthy"] = int(health.healthy)
        return out

    def histograms(self) -> dict[str, dict[tuple[str, ...], HistogramSnapshot]]:
        """Message sizes by route and store put latencies, for ``gateway.prometheus``."""
        return self._metrics.histograms()

    def close(self, timeout: float = -1) -> bool:
        """Flush, close the auditor (which may publish its last counts), then the librdkafka producer.

        True when the close went ahead; a later close returns False, and every other call raises
        ``RuntimeError``. Closed whatever a step raises, as confluent-kafka's is: a fenced
        transactional producer's close raises ``_FENCED`` there and is closed all the same, so here
        every step still runs and the first error is raised at the end. Messages still in flight
        after ``timeout`` are reported failed by librdkafka's close, and a reference message among
        them keeps its payload and pending mark for ``gateway gc``.
        """
        if self._closed:
            return False
        errors: list[Exception] = []
        _attempt(lambda: self.flush(timeout), errors)
        self._closed = True  # from here on produce() refuses, whatever the flush raised
        _attempt(self._references.close, errors)
        _attempt(self._compaction.close, errors)
        if self._auditor is not None:
            _attempt(self._auditor.close, errors)
            _attempt(lambda: self._producer.flush(10 if timeout < 0 else timeout), errors)
        closed = _attempt(self._producer.close, errors)
        if errors:
            raise errors[0]
        return bool(closed)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self._producer.purge(in_queue=in_queue, in_flight=in_flight, blocking=blocking)

    @property
    def inner(self) -> Producer:
        """The wrapped librdkafka producer, for what this wrapper does not expose."""
        return self._producer


def _attempt(step: Callable[[], object], errors: list[Exception]) -> object:
    """``step()``'s result, or None with its error appended to ``errors``: a close goes on past a failed step."""
    try:
        return step()
    except Exception as exc:  # noqa: BLE001 - kept, and raised once the close is complete
        errors.append(exc)
        return None


def _forced(route: Route | str) -> Route:
    """``produce(route=...)`` as a :class:`Route`."""
    if isinstance(route, Route):
        return route
    if isinstance(route, str):
        return Route.parse(route)
    raise TypeError(f"route must be a Route, 'plain', 'chunked' or 'reference:<store>', got {route!r:.80}")


def _audited(auditor: Auditor, message: OutgoingMessage) -> DeliveryCallback:
    """``message``'s callback, recording SUCCESS or FAILURE in the audit bucket its ATTEMPT went to first."""
    on_delivery = message.on_delivery
    topic, timestamp, size = message.topic, message.timestamp, message.key_size + message.size

    def report(err: Any, msg: Any) -> None:
        auditor.record(topic, timestamp, 1, size, AuditType.FAILURE if err is not None else AuditType.SUCCESS)
        if on_delivery is not None:
            on_delivery(err, msg)

    return report


__all__ = ["HybridProducer", "KafkaError", "KafkaException"]
