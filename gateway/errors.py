"""Typed errors.

The hierarchy mirrors LinkedIn's ``LargeMessageException`` family so that code ported from
``li-apache-kafka-clients`` can catch the same shapes, and every error raised by the consumer
carries the record it concerns so that nothing is lost when a loop catches and continues.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaError, KafkaException


class GatewayError(Exception):
    """Root of every error this library raises on purpose.

    ``kafka_message`` is the record the error concerns, passed to the constructor as
    confluent-kafka's ``ConsumeError`` takes it (or set by the consumer on an error raised deeper
    down), so a loop that catches the error still holds the data.
    """

    def __init__(self, *args: Any, kafka_message: Any = None) -> None:
        super().__init__(*args)
        self.kafka_message = kafka_message


class ConfigurationError(GatewayError, ValueError):
    """A setting that cannot work: a route to a store that was never given, an impossible size."""


class ReferenceFormatError(ConfigurationError):
    """``reference.format`` (bakdata's or AWS's pointer records) cannot carry this setting or message.

    Raised at construction for a combination the foreign reader could not follow (sealing, our
    compression, a store of a scheme it does not read, chunks), and by ``produce`` for a message it
    would alter (AWS's reader decodes payloads as UTF-8 text), before anything is written.
    """


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that installs it.

    An ``ImportError`` (not a :class:`GatewayError`), so ``except ImportError`` around an optional
    feature keeps working; the extra in the text is what a user can act on, where a bare
    ``No module named 'pyarrow'`` names a package they never chose.
    """


def check_extra(extra: str, feature: str, *packages: str) -> None:
    """:class:`MissingExtraError` unless every package is installed, without importing any (PySpark takes seconds)."""
    import importlib.util  # only the commands that check an extra pay for it

    for package in packages:
        if importlib.util.find_spec(package) is None:
            raise MissingExtraError(
                f"{feature} needs the {package!r} package: pip install 'kafka-hybrid-gateway[{extra}]'", name=package
            )


@contextmanager
def extra_required(extra: str, feature: str) -> Iterator[None]:
    """Turn a third-party module missing inside the block into :class:`MissingExtraError` naming ``extra``.

    Our own modules missing is a broken install, not a missing extra, and propagates as it is.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] in ("gateway", "stores"):
            raise
        raise MissingExtraError(
            f"{feature} needs the {exc.name.split('.')[0]!r} package: pip install 'kafka-hybrid-gateway[{extra}]'",
            name=exc.name,
        ) from exc


class ProtocolError(GatewayError, ValueError):
    """Bytes that claim to be one of our wire formats but cannot be decoded."""


class HeaderFormatError(ProtocolError):
    """A reserved header (``_lm``, ``_t``, ``_so``, envelope) has the wrong length or layout."""


class EnvelopeFormatError(ProtocolError):
    """A value marked as a reference envelope is truncated, garbled or of an unknown version."""


class PeerFormatError(ProtocolError):
    """A record that is unmistakably in another library's format (bakdata, kaf-s3, AWS) but cannot be read."""


class LargeMessageError(GatewayError):
    """LinkedIn's ``LargeMessageException``: the parent of the large-message errors."""


class MessageTooLargeError(LargeMessageError, ValueError):
    """``produce`` refused a value above its route's limit (``large.message.max.bytes`` for chunked,
    ``reference.max.payload.bytes`` for a store) before anything was written: the consumers' matching
    limits would refuse it on every poll, so it would never be delivered."""


class InvalidSegmentError(LargeMessageError, ProtocolError):
    """A segment that fails LinkedIn's sanity checks, or a set of segments that cannot be assembled."""


class LargeMessageDroppedError(LargeMessageError):
    """An incomplete message was evicted from the assembler buffer (only when configured to raise)."""

    def __init__(self, message: str, dropped: Any = None, *, kafka_message: Any = None) -> None:
        super().__init__(message, kafka_message=kafka_message)
        self.dropped = dropped


class LargeMessageSendError(LargeMessageError, KafkaException):
    """A logical message could not be written completely; ``cause`` is the first error seen.

    It stands for a failed produce, so it is a ``KafkaException`` too: code that wraps
    ``Producer.produce`` in ``except KafkaException`` catches it unchanged. It answers
    ``code()``/``name()``/``retriable()``/``fatal()`` itself, from the Kafka error behind ``cause``.
    """

    def __init__(self, message: str, cause: Any = None, sent: int = 0, total: int = 0) -> None:
        super().__init__(message)
        self.cause = cause
        self.sent = sent
        self.total = total

    # It stands where confluent-kafka passes a KafkaError, so it answers the same questions.
    def _kafka_error(self) -> Any:
        """The KafkaError behind ``cause``, also when it came wrapped in a KafkaException."""
        cause = self.cause
        if not hasattr(cause, "code") and getattr(cause, "args", None):
            cause = cause.args[0]
        return cause if hasattr(cause, "code") else None

    def code(self) -> Any:
        """The ``KafkaError`` code behind the failure, so ``err.code() == KafkaError._MSG_TIMED_OUT`` works."""
        error = self._kafka_error()
        return None if error is None else error.code()

    def name(self) -> str:
        """The Kafka error's name (``_MSG_TIMED_OUT``), or this class's when no Kafka error caused it."""
        error = self._kafka_error()
        return type(self).__name__ if error is None else str(error.name())

    def str(self) -> str:
        """The message, as ``KafkaError.str()`` gives it to code written for confluent-kafka."""
        return str(self)

    def retriable(self) -> bool:
        """Whether sending the message again may succeed (the Kafka error's answer; no cause: no)."""
        error = self._kafka_error()
        return False if error is None else bool(error.retriable())

    def fatal(self) -> bool:
        """Whether the producer is unusable now (a fatal idempotence or transaction error)."""
        error = self._kafka_error()
        return False if error is None else bool(error.fatal())


class RecordTooLargeError(ConfigurationError, KafkaException):
    """``produce`` refused a message whose key and headers leave its record no room, before any store write.

    Each route refused this already, but as different types: librdkafka's ``KafkaException``
    (``MSG_SIZE_TOO_LARGE``) for a plain record, :class:`ConfigurationError` for segments. It is both,
    so code written against either route catches it on every route; ``args[0]`` is the
    ``KafkaError``, as in every ``KafkaException``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, reason))

    def __reduce__(self) -> Any:
        return (type(self), (self.args[0].str(),))


class DeliveryError(KafkaError):
    """What ``on_delivery`` receives when the gateway, rather than librdkafka, failed a message.

    confluent-kafka promises a ``KafkaError`` there, and callbacks rely on it (``err.code()``,
    ``err.retriable()``, ``err == KafkaError._MSG_TIMED_OUT``); so a store outage, a chunked message
    with a refused segment or a write that failed after ``produce`` returned is reported as one,
    with a code chosen by :mod:`gateway.producer._delivery_error` (docs/consumer.md, "Producer
    side"), and the gateway's own typed error as :attr:`cause`. It is not an ``Exception``
    (``KafkaError`` is not one); ``KafkaException(err)`` raises it, as confluent-kafka's clients do.
    """

    def __init__(
        self,
        code: int,
        reason: str,
        *,
        cause: BaseException | None = None,
        fatal: bool = False,
        retriable: bool = False,
        txn_requires_abort: bool = False,
    ) -> None:
        super().__init__(code, reason, fatal=fatal, retriable=retriable, txn_requires_abort=txn_requires_abort)
        self.cause = cause
        """The typed error behind this report (a :class:`StoreError`, :class:`LargeMessageSendError`, ...)."""

    # librdkafka's comparison takes only a plain KafkaError or an int as the other side, and fails on a subclass
    def __eq__(self, other: object) -> bool:
        if isinstance(other, KafkaError):
            return self.code() == other.code()
        if isinstance(other, int):
            return self.code() == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self.code())

    def __repr__(self) -> str:
        cause = type(self.cause).__name__
        return f'DeliveryError{{code={self.name()},val={self.code()},str="{self.str()}",cause={cause}}}'

    def __reduce__(self) -> Any:
        flags = (self.fatal(), self.retriable(), self.txn_requires_abort())
        return (_delivery_error, (self.code(), self.str(), self.cause, *flags))


def _delivery_error(code: int, reason: str, cause: Any, fatal: bool, retriable: bool, abort: bool) -> DeliveryError:
    return DeliveryError(code, reason, cause=cause, fatal=fatal, retriable=retriable, txn_requires_abort=abort)


class OffsetNotTrackedError(LargeMessageError):
    """LinkedIn's ``OffsetNotTrackedException``: an offset outside what the tracker still knows."""

    def __init__(self, topic: str, partition: int, offset: int, message: str | None = None) -> None:
        super().__init__(message or f"offset {offset} of {topic}[{partition}] is not tracked")
        self.topic = topic
        self.partition = partition
        self.offset = offset


class StoreError(GatewayError):
    """A payload store failed or refused an operation."""


class LocatorError(StoreError, ProtocolError):
    """A locator that points outside the store's bucket or prefix, or is malformed."""


class LocatorTopicError(LocatorError):
    """An envelope, or a peer library's pointer, naming a payload written for another topic than its record's.

    Anyone who can write to a topic and has seen an envelope of another topic could otherwise make
    this topic's readers receive that topic's payload. ``reference.topic.renames`` names the topics
    that are copies of others under another name (MirrorMaker 2's ``source.A``).
    """


class EnvelopePayloadError(LocatorError):
    """A peer library's pointer (bakdata, kaf-s3, AWS) names a payload this library wrote for an envelope.

    Only that envelope says whether the stored bytes are sealed (``reference.encryption``) or
    compressed, and only it carries the wrapped key that opens them; served through a pointer, they
    would be ciphertext or encoded bytes handed out as the value. Peers never write objects of our
    layout, so such a pointer is forged or mistaken, whatever topic it is in.
    """


class PayloadTooLargeError(StoreError):
    """An envelope declares a payload above ``reference.max.payload.bytes``: refused before any read,
    since a reader holds a payload whole and a forged size would otherwise be allocated."""


class PayloadNotFoundError(StoreError):
    """The store has no payload at the locator (expired, swept or never written)."""


class PayloadIntegrityError(StoreError):
    """The fetched payload's size or checksum does not match the envelope."""


class _StreamRecordError(StoreError):
    """A stream's error names the record whose value the stream is: ``topic``, ``partition``, ``offset``."""

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        kafka_message: Any = None,
    ) -> None:
        super().__init__(message, kafka_message=kafka_message)
        self.topic = topic
        self.partition = partition
        self.offset = offset


class PayloadStreamIntegrityError(_StreamRecordError, PayloadIntegrityError):
    """A payload read as a :class:`gateway.PayloadStream` is not the one its envelope describes: truncated,
    extended, tampered with (its digest, checked when the stream ends), or a sealed segment that failed
    authentication. Raised by the read that would have returned the payload's end (or the bad segment),
    never after the stream reported its end, so a reader that got ``b""`` has read a checked payload.

    ``topic``, ``partition`` and ``offset`` name the record whose value the stream is (``None`` where the
    reader has no such record, as a Spark task's offset-only key)."""


class PayloadStreamClosedError(_StreamRecordError, ValueError):
    """A :class:`gateway.PayloadStream` was read after the consumer that handed it out was closed (or after
    the stream's own ``close()``): its store client and read-ahead threads are gone with the consumer.
    ``topic``, ``partition`` and ``offset`` name the record, as on :class:`PayloadStreamIntegrityError`."""


class StoreUnavailableError(StoreError):
    """The store could not be reached, or is marked unhealthy by the policy layer."""


class FallbackRefusedError(StoreUnavailableError):
    """The store is down and the message may not go inline instead, so nothing of it was sent anywhere.

    ``reason`` says which guarantee the fallback would have broken: ``"encrypted"`` (``reference.encryption``
    is set and an inline record is never sealed), ``"forced"`` (the route was forced with ``route=``, or the
    topic is compacted and must not be chunked) or ``"oversize"`` (above ``reference.fallback.inline.max.bytes``).
    A :class:`StoreUnavailableError` still, so code written for the store being down handles it unchanged.
    """

    def __init__(self, message: str, *, store: str, reason: str, kafka_message: Any = None) -> None:
        super().__init__(message, kafka_message=kafka_message)
        self.store = store
        self.reason = reason


class StoreNotConfiguredError(ConfigurationError, StoreError):
    """A record names a store this client was not given (``stores=``): its configuration, not an outage.

    Not retried: asking again cannot find a store that was never passed in.
    """


class EncryptionError(GatewayError):
    """Client-side payload encryption (``reference.encryption``) could not seal or open a payload."""


class KeyUnavailableError(EncryptionError):
    """The key provider will not give the key: no key under the envelope's key id, the key disabled or
    pending deletion, access to it denied. Final: asking again gives the same answer, so it is not retried.

    The payload stays in the store untouched; the record travels with the error, so a consumer that
    is given the key later (a key ring restored, a KMS grant added) can read it again from the offset.
    Not a :class:`StoreError`: the store did its part.
    """


class KeyProviderUnavailableError(KeyUnavailableError):
    """The key provider could not be asked just now: unreachable, throttled, timed out, or it raised an
    error of its own (a Vault or HSM client's ``ConnectionError``). Transient, as
    :class:`StoreUnavailableError` is for a store: the consumer retries it under
    ``reference.error.max.attempts`` before ``reference.error.policy`` may pass the record over.

    A :class:`KeyUnavailableError` too, so code written for that one catches it unchanged; the
    provider's own exception is its ``__cause__`` (its text is left out of this one's, which may be logged).
    """


class PayloadAuthenticationError(EncryptionError, PayloadIntegrityError):
    """An encrypted payload failed AES-GCM authentication: tampered, truncated, swapped or moved to another record.

    No byte of such a payload is ever returned. It is a :class:`PayloadIntegrityError` too, so code
    that already handles a payload that does not match its envelope handles this one unchanged.
    """


class StreamError(LargeMessageError):
    """``produce_stream`` could not send its stream; nothing of it stays in the store and no envelope was sent.

    ``topic`` and ``key`` name the message, since the stream itself cannot be handed back: it was read
    once, as it went up.
    """

    def __init__(self, message: str, *, topic: str, key: Any = None, kafka_message: Any = None) -> None:
        super().__init__(message, kafka_message=kafka_message)
        self.topic = topic
        self.key = key


class StreamSourceError(StreamError):
    """The source raised while it was read (the cause is chained)."""


class StreamSizeError(StreamSourceError, ValueError):
    """The source gave more or fewer bytes than the ``size`` declared for it."""


class StreamUploadError(StreamError, StoreError):
    """The store failed while the stream was going up (the store's own error is chained); the upload was aborted."""


class StreamRouteError(StreamError, MessageTooLargeError):
    """A stream forced onto the chunked or plain route above what that route takes: refused before any byte is read."""
