"""What ``on_delivery`` receives as ``err``: the one place that decides it, for every route.

confluent-kafka passes a ``KafkaError`` (or ``None``), and delivery callbacks are written against
that: ``err.code()``, ``err.name()``, ``err.retriable()``, ``err == KafkaError._MSG_TIMED_OUT``.
librdkafka's own reports (a plain record, a segment, an envelope) already are one and pass through
unchanged. A failure the gateway itself reports (a store write that failed after ``produce``
returned, a chunked message whose segments were refused, an envelope that could not be queued)
becomes a :class:`~gateway.errors.DeliveryError`, a ``KafkaError`` whose code says what kind of
failure it was and whose ``cause`` is the typed error. The table of codes is in docs/consumer.md
("Producer side") and :func:`delivery_error` below; pure, so it is unit-tested alone.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, KafkaException, Message

from gateway.core.outgoing import DeliveryCallback, OutgoingMessage
from gateway.errors import (
    ConfigurationError,
    DeliveryError,
    LargeMessageSendError,
    MessageTooLargeError,
    PayloadTooLargeError,
    StoreUnavailableError,
)


def delivery_error(err: Any) -> KafkaError | None:
    """``err`` as a delivery report's error: ``None``, a ``KafkaError`` as it is, anything else a DeliveryError."""
    if err is None or isinstance(err, KafkaError):
        return err
    kafka = _kafka_error_in(err)
    if kafka is not None:  # librdkafka's answer, wrapped by the gateway: keep its code and flags
        return DeliveryError(
            kafka.code(),
            _reason(err, kafka),
            cause=err,
            fatal=kafka.fatal(),
            retriable=kafka.retriable(),
            txn_requires_abort=kafka.txn_requires_abort(),
        )
    code, retriable = _code_of(err)
    return DeliveryError(code, f"{type(err).__name__}: {err}", cause=err, retriable=retriable)


def report(on_delivery: DeliveryCallback, err: Any, msg: Any) -> None:
    """Call a caller's ``on_delivery`` with :func:`delivery_error` of ``err``."""
    on_delivery(delivery_error(err), msg)


def failed_message(message: OutgoingMessage, err: KafkaError | None) -> Message:
    """The ``msg`` of a failure reported without a record from librdkafka: the caller's own message, ``error()`` set.

    librdkafka always passes the failed record, and callbacks read it (``msg.topic()``, ``msg.key()``)
    to say which message failed; a store write that failed in the window never became a record.
    """
    fields: dict[str, Any] = {"topic": message.topic, "error": err, "value": message.payload, "key": message.key_bytes}
    if message.partition >= 0:
        fields["partition"] = message.partition
    if message.header_items:
        fields["headers"] = message.header_list
    if message.timestamp > 0:
        fields["timestamp"] = (TIMESTAMP_CREATE_TIME, message.timestamp)
    return Message(**fields)


def _kafka_error_in(err: Any) -> KafkaError | None:
    """The ``KafkaError`` an exception carries: a ``KafkaException``'s ``args[0]``, a LargeMessageSendError's cause."""
    if isinstance(err, LargeMessageSendError):
        cause = err.cause
        if isinstance(cause, KafkaError):
            return cause
        return _kafka_error_in(cause) if isinstance(cause, BaseException) else None
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        return err.args[0]
    return None


def _reason(err: BaseException, kafka: KafkaError) -> str:
    if isinstance(err, LargeMessageSendError):  # "... Sent 0 of 3 segments.: Broker: Message size too large"
        return f"{err}: {kafka.str()}"
    return kafka.str()


def _code_of(err: BaseException) -> tuple[int, bool]:
    """The code and retriability of a failure no Kafka error stands behind."""
    if isinstance(err, BufferError):  # librdkafka's queue stayed full past large.message.block.ms
        return KafkaError._QUEUE_FULL, True
    if isinstance(err, StoreUnavailableError):  # an outage: the store may answer later
        return (KafkaError._MSG_TIMED_OUT if _timed_out(err) else KafkaError._TRANSPORT), True
    if isinstance(err, (MessageTooLargeError, PayloadTooLargeError)):
        return KafkaError.MSG_SIZE_TOO_LARGE, False
    if isinstance(err, ConfigurationError):  # a store never given, a key too large, ...: asking again cannot help
        return KafkaError._INVALID_ARG, False
    return KafkaError._APPLICATION, False  # any other store refusal, a key provider, a defect: final


def _timed_out(err: BaseException) -> bool:
    """Whether a timeout is among the causes of ``err`` (socket, redis-py and botocore timeouts alike)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TimeoutError) or "Timeout" in type(current).__name__:
            return True
        current = current.__cause__ or current.__context__
    return False


__all__ = ["delivery_error", "failed_message", "report"]
