"""Typed errors.

The hierarchy mirrors LinkedIn's ``LargeMessageException`` family so that code ported from
``li-apache-kafka-clients`` can catch the same shapes, and every error raised by the consumer
carries the record it concerns so that nothing is lost when a loop catches and continues.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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
    """The key provider has no key under the envelope's key id, or could not be asked (KMS refused or unreachable).

    The payload stays in the store untouched; the record travels with the error, so a consumer that
    is given the key later (a key ring restored, a KMS grant added) can read it again from the offset.
    """


class PayloadAuthenticationError(EncryptionError, PayloadIntegrityError):
    """An encrypted payload failed AES-GCM authentication: tampered, truncated, swapped or moved to another record.

    No byte of such a payload is ever returned. It is a :class:`PayloadIntegrityError` too, so code
    that already handles a payload that does not match its envelope handles this one unchanged.
    """
