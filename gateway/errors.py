"""Typed errors.

The hierarchy mirrors LinkedIn's ``LargeMessageException`` family so that code ported from
``li-apache-kafka-clients`` can catch the same shapes, and every error raised by the consumer
carries the record it concerns so that nothing is lost when a loop catches and continues.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaException


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
        error = self._kafka_error()
        return None if error is None else error.code()

    def name(self) -> str:
        error = self._kafka_error()
        return type(self).__name__ if error is None else str(error.name())

    def str(self) -> str:
        return str(self)

    def retriable(self) -> bool:
        error = self._kafka_error()
        return False if error is None else bool(error.retriable())

    def fatal(self) -> bool:
        error = self._kafka_error()
        return False if error is None else bool(error.fatal())


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
    """An envelope whose locator names a payload written for another topic than its record's.

    Anyone who can write to a topic and has seen an envelope of another topic could otherwise make
    this topic's readers receive that topic's payload. ``reference.topic.renames`` names the topics
    that are copies of others under another name (MirrorMaker 2's ``source.A``).
    """


class PayloadTooLargeError(StoreError):
    """An envelope declares a payload above ``reference.max.payload.bytes``: refused before any read,
    since a reader holds a payload whole and a forged size would otherwise be allocated."""


class PayloadNotFoundError(StoreError):
    """The store has no payload at the locator (expired, swept or never written)."""


class PayloadIntegrityError(StoreError):
    """The fetched payload's size or checksum does not match the envelope."""


class StoreUnavailableError(StoreError):
    """The store could not be reached, or is marked unhealthy by the policy layer."""


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
