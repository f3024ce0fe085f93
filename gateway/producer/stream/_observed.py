"""What ``produce`` does around a message, done around a stream's: its audit counts and its PRODUCER span.

A stream's message has no value in memory, so its size is the declared one
(:class:`StreamedMessage`): the auditor, the span's ``messaging.message.body.size`` and the
producer's ``reference.bytes`` then count it as ``produce`` counts the same bytes. The span is
started before the first byte is read and ended by the delivery report, so it covers the upload.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway import tracing
from gateway.auditing import Auditor, AuditType
from gateway.core.outgoing import OutgoingMessage
from gateway.producer._audited import audited
from gateway.telemetry.semconv import ClientInfo


@dataclass(frozen=True, slots=True)
class StreamedMessage(OutgoingMessage):
    """A message whose value is a source read as it goes up: ``value`` is the source, ``payload`` None."""

    declared: int = 0
    """The stream's size as the caller declared it (and the source is held to)."""

    @property
    def size(self) -> int:
        return self.declared

    @classmethod
    def streamed(cls, checked: OutgoingMessage, source: Any, size: int) -> StreamedMessage:
        """``checked`` (``produce``'s arguments, checked as it checks them) with the source standing for the
        value: not a tombstone, and no payload in memory."""
        return cls(
            checked.topic, source, None, checked.key, checked.partition, checked.on_delivery, checked.timestamp,
            checked.headers, checked.key_data, checked.header_items, declared=size,
        )  # fmt: skip


class StreamObservation:
    """One stream's audit and span: :meth:`message` before the upload, then :meth:`routed` or :meth:`failed`."""

    def __init__(self, auditor: Auditor | None, telemetry: ClientInfo, now_ms: Callable[[], int]) -> None:
        self._auditor = auditor
        self._telemetry = telemetry
        self._now_ms = now_ms
        self._span: tracing.ProduceSpan | None = None
        self._attempt: OutgoingMessage | None = None

    def message(self, message: OutgoingMessage) -> OutgoingMessage:
        """``message`` stamped, audited (ATTEMPT) and traced, its callback closing both, as ``produce`` does."""
        auditor = self._auditor
        if auditor is not None:
            message = message.stamped(self._now_ms)  # producer and consumer audit the same time bucket
            auditor.record(message.topic, message.timestamp, 1, message.key_size + message.size, AuditType.ATTEMPT)
            self._attempt = message
            message = message.with_callback(audited(auditor, message))
        self._span = tracing.start_produce(message, self._telemetry)
        return message if self._span is None else self._span.message

    def routed(self, store: str) -> None:
        if self._span is not None:
            self._span.routed("reference", store, 1)

    def failed(self, exc: BaseException) -> None:
        """The call raised: nothing went to Kafka; the audit counts a FAILURE, the span ends with the error."""
        if self._auditor is not None and self._attempt is not None:
            attempt = self._attempt
            self._auditor.record(attempt.topic, attempt.timestamp, 1, attempt.size, AuditType.FAILURE)
        if self._span is not None:
            self._span.failed(exc)
