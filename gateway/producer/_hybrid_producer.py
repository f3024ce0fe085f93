"""``HybridProducer``: a confluent-kafka ``Producer`` that sends values of any size.

Per message, a policy picks the route. Plain records go straight to librdkafka with the caller's
arguments untouched. Chunked messages become LinkedIn segments that share key, partition and
timestamp; their per-segment delivery reports are folded into one ``on_delivery`` call per
logical message (:mod:`gateway.producer._segment_reports`). Reference messages are written to a store first and
removed again if Kafka refuses the envelope (:mod:`gateway.producer.reference.writer`). This class only
drives them (:mod:`gateway.producer._routed_send` for every record but a small plain one,
:mod:`gateway.producer._chunked_writer` for segments): every record of every route, and
every poll, flush, purge and transaction call, goes to librdkafka through one
:class:`~gateway.producer._outbox.Outbox`, which keeps them in order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from gateway import tracing
from gateway.auditing import Auditor
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.core.outgoing import DeliveryCallback, OutgoingMessage, accepted_as_is, as_bytes, headers_list
from gateway.encryption import KeyProvider, ReferenceEncryption
from gateway.errors import ConfigurationError
from gateway.policy import Policy, Route, Router, as_policy
from gateway.producer._config import ProducerSettings, confluent_config, parse_producer_config
from gateway.producer._confluent_methods import CLOSED, NO_OUTBOX, ConfluentMethods, TransactionMethods
from gateway.producer._parts import make_parts
from gateway.producer._route_choice import forced_route
from gateway.producer._routed_send import RoutedSend
from gateway.producer.stream.writer import StreamWriter
from gateway.protocol.peers.pointer_formats import check_producer
from gateway.serialization import Serializers
from gateway.store import Store, checked_stores


class HybridProducer(ConfluentMethods, TransactionMethods, Producer):
    """Drop-in for ``confluent_kafka.Producer`` with per-message routing.

    A subclass of ``confluent_kafka.Producer``, as confluent-kafka's own ``SerializingProducer`` is, so
    code that checks the class takes it; every method is this class's own, and the librdkafka
    producer it drives is a separate one (:attr:`inner`). Configured as confluent-kafka's is: a dict,
    keyword arguments (``HybridProducer(**conf)``, ``HybridProducer(conf, logger=log)``), or both.

    The keys it owns are popped before librdkafka sees the config (:mod:`gateway.producer._config`;
    the table is in ``docs/consumer.md``, "Producer side"). The fallback cap stays below the
    consumer's default buffer capacity, since a chunked message larger than it cannot be assembled.

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

    _closed = True
    _outbox = NO_OUTBOX
    """What a subclass that skipped ``__init__`` has: every call refused as confluent-kafka refuses it."""

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        policy: Policy | Router | None = None,
        stores: Mapping[str, Store] | None = None,
        *,
        auditor: Auditor | None = None,
        clock: Clock = SYSTEM_CLOCK,
        key_provider: KeyProvider | None = None,
        **kwargs: Any,
    ) -> None:
        config = confluent_config(config, kwargs)
        encryption = ReferenceEncryption.from_config(config, key_provider)
        self._serializers = Serializers.pop_from(config)
        self.settings, conf = parse_producer_config(config)
        self.segment_bytes = self.settings.segment_bytes
        self.policy: Policy = as_policy(policy)
        self.stores: dict[str, Store] = checked_stores(stores)
        _check_stores(self.settings, self.policy, self.stores, encryption)
        self._plain_direct = not self._serializers and auditor is None and not self.settings.wrap_small
        """Whether a small plain record may skip the general path (see :meth:`_produce_direct`)."""
        self.health = {name: self.settings.store_health() for name in self.stores}
        self._auditor = auditor
        if auditor is not None:
            auditor.start()
        parts = make_parts(self.settings, conf, self.policy, self.stores, self.health, clock, encryption)
        self._outbox = parts.outbox
        """The one way to librdkafka: records of every route in order, the write window and its time bound."""
        self._warmup = parts.warmup
        self._compaction = parts.compaction
        self._routes = parts.routes
        self._plain_up_to = self._routes.plain_up_to
        self._direct_room = self.settings.max_message_bytes - self.settings.overhead
        """Key and value bytes a record on the direct path may take, as :meth:`ProducerSettings.segment_room` counts."""
        self._closed = False
        self._metrics = parts.metrics
        self._chunks = parts.chunks
        self._references = parts.references
        telemetry = tracing.client_info(conf)  # span and metric attributes (client.id, first broker)
        self._routed = RoutedSend(self.settings, self.stores, parts, auditor, clock, telemetry)
        """Every record but a small plain one: the chosen route's writer, audited and traced."""
        self._streams = StreamWriter(
            self.settings, self.policy, self._routes, self._compaction, parts.admission, self._references,
            self._outbox, encryption, clock, self.produce, auditor, telemetry,
        )  # fmt: skip

    def route_for(self, topic: str, size: int, key: Any = None, headers: Any = None) -> Route:
        """The route ``produce`` will take for a value of ``size`` bytes (the policy's answer)."""
        return self._routes.route(topic, size, as_bytes(key, "key"), headers_list(headers))

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        *positional: Any,
        callback: DeliveryCallback | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Any = None,
        route: Route | str | None = None,
    ) -> None:
        """``Producer.produce`` (same arguments, same order) plus ``route=`` to force a route for this one message.

        After ``partition``, positional arguments are read in confluent-kafka's order (``callback``,
        ``on_delivery``, ``timestamp``, ``headers``) or in the order ``../shared/API.md`` shows
        (``on_delivery``, ``timestamp``, ``headers``): both are promised, and they differ in where the
        timestamp goes, which its type tells (an ``int``; a delivery callback never is one).
        """
        if self._closed:  # before any store write: a closed producer could not send its envelope
            raise RuntimeError(CLOSED)
        if positional:
            callback, on_delivery, timestamp, headers = _positional(
                positional, callback, on_delivery, timestamp, headers
            )
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
        self._routed.send(
            message, self._routes.of(message) if route is None else forced_route(route), route is not None
        )

    def produce_stream(
        self,
        topic: str,
        source: Any,
        size: int,
        key: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Any = None,
        route: Route | str | None = None,
    ) -> None:
        """Send ``size`` bytes read from ``source`` (a readable binary file, or an iterable of bytes-like chunks)
        as one message, holding a part of it at a time (:mod:`gateway.producer.stream.writer`).

        The route is chosen from ``size``; ``on_delivery`` is called as for ``produce``, with the
        message's value ``None`` (the stream is not kept). A source that raises or gives another size
        than ``size``, or a store that fails mid-upload, raises a :class:`~gateway.errors.StreamError`
        and leaves nothing in the store or the topic.
        """
        if self._closed:
            raise RuntimeError(CLOSED)
        self._streams.send(topic, source, size, key, partition, on_delivery, timestamp, headers, route)

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
            or len(value) + (len(key) if key else 16) > self._direct_room  # the route counts the whole record
            or tracing.enabled()  # a traced record gets its span on the general path
        ):
            return False
        produce = self._outbox.produce
        if on_delivery is not None:
            produce(topic, value, key, partition, on_delivery=on_delivery, timestamp=timestamp)
        elif timestamp:
            produce(topic, value, key, partition, timestamp=timestamp)
        else:  # the common case; positional arguments are the cheapest call into confluent-kafka
            produce(topic, value, key, partition)
        self._metrics.plain_record(len(value), 0 if key is None else len(key))
        return True

    # -- Producer surface: each call is the outbox's -------------------------------------------
    def poll(self, timeout: float = -1) -> int:
        """Serve delivery reports; blocks up to ``timeout`` seconds (-1 or None: until one is served)."""
        return self._outbox.poll(-1 if timeout is None else timeout)

    def flush(self, timeout: float = -1) -> int:
        """Wait for delivery reports; returns the *logical* messages still in flight."""
        self._outbox.flush(timeout)
        return len(self)

    def __bool__(self) -> bool:
        return True  # an empty producer is still a producer (``__len__`` alone made it falsy)

    def __len__(self) -> int:
        if self._outbox is NO_OUTBOX:  # __init__ never ran: nothing in flight, as confluent-kafka answers
            return 0
        return self._chunks.in_flight.logical(lambda: len(self._outbox)) + int(self._references.in_flight)

    def close(self, timeout: float = -1) -> bool:
        """Flush, close the auditor (which may publish its last counts), then the librdkafka producer.

        True when the close went ahead; a later close returns False, and every other call raises
        ``RuntimeError``. Every step runs whatever an earlier one raised, and the first error is
        raised at the end (:meth:`Outbox.close`). Messages still in flight after ``timeout`` are
        reported failed by librdkafka's close, and a reference message among them keeps its payload
        and pending mark for ``gateway gc``.
        """
        if self._closed:
            return False
        after: list[Callable[[], object]] = [self._warmup.close, self._references.close, self._compaction.close]
        if self._auditor is not None:
            after += [self._auditor.close, lambda: self._outbox.flush(10 if timeout < 0 else timeout)]
        return self._outbox.close([lambda: self.flush(timeout), self._refuse_produce], after)

    def _refuse_produce(self) -> None:
        self._closed = True  # from here on produce() refuses, whatever the flush raised


def _check_stores(
    settings: ProducerSettings, policy: Policy, stores: Mapping[str, Store], encryption: ReferenceEncryption
) -> None:
    """Refuse, before anything is made, stores that the policy, the encryption or a peer's format cannot use."""
    missing = sorted(policy.store_names() - set(stores))
    if missing:
        raise ConfigurationError(f"the policy routes to {missing}, but stores= has {sorted(stores) or 'none'}")
    encryption.check_stores(stores)
    check_producer(
        settings.reference_format,
        stores=stores,
        encrypted=encryption.enabled,
        compression=settings.compression,
        wrap_small=settings.wrap_small,
    )


__all__ = ["HybridProducer", "KafkaError", "KafkaException"]


_CONFLUENT_ORDER = ("callback", "on_delivery", "timestamp", "headers")
_API_ORDER = ("on_delivery", "timestamp", "headers")


def _positional(
    args: tuple[Any, ...], callback: Any, on_delivery: Any, timestamp: Any, headers: Any
) -> tuple[Any, ...]:
    """``produce``'s positional arguments after ``partition``, in either promised order (see ``produce``)."""
    names = _API_ORDER if len(args) > 1 and type(args[1]) is int else _CONFLUENT_ORDER
    if len(args) > len(names):
        raise TypeError(f"produce() takes at most {4 + len(names)} positional arguments ({4 + len(args)} given)")
    given = {"callback": callback, "on_delivery": on_delivery, "timestamp": timestamp, "headers": headers}
    for name, value in zip(names, args, strict=False):
        if given[name] not in (None, 0):
            raise TypeError(f"produce() got multiple values for argument '{name}'")
        given[name] = value
    return given["callback"], given["on_delivery"], given["timestamp"], given["headers"]
