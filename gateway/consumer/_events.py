"""What :class:`~gateway.consumer._hybrid_consumer.HybridConsumer` does with the pipeline's events for one record.

The librdkafka ``Message`` of the record is what the application receives: its value and headers
are replaced by the whole message's, a reference is resolved into its payload, and LinkedIn's
``_so`` header is appended here, and only here, when the safe offset is not ``offset + 1``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, Message

from gateway.auditing import Auditor, AuditType
from gateway.consumer._errors import DeadLetters, ErrorPolicy, RateLimitedLog, UnresolvedSettings, attempt
from gateway.consumer.config import ConsumerSettings
from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.core.pipeline import (
    ChunkCompleted,
    ConsumerPipeline,
    Event,
    InvalidRecord,
    MessageDropped,
    PlainMessage,
    ReferenceToResolve,
    WholeMessage,
    error_text,
)
from gateway.errors import EnvelopeFormatError, GatewayError, LargeMessageDroppedError
from gateway.protocol.headers import SAFE_OFFSET_HEADER, Headers, encode_safe_offset
from gateway.protocol.peers import PeerRecord
from gateway.streams.payload_stream import PayloadStream

log = logging.getLogger(__name__)


def with_safe_offset(message: WholeMessage) -> Headers | None:
    """The headers to hand out: LinkedIn appends ``_so`` while a message before this one is incomplete."""
    headers = message.headers
    if message.safe_offset != message.record.offset + 1:
        headers = [*(headers or ()), (SAFE_OFFSET_HEADER, encode_safe_offset(message.safe_offset))]
    return headers


class EventHandler:
    """Turns one record's events into the message to return, a raised typed error, or nothing."""

    def __init__(
        self,
        pipeline: ConsumerPipeline,
        refs: ReferenceFetcher,
        deliver_errors: bool,
        auditor: Auditor | None,
        unresolved: UnresolvedSettings | None = None,
        dead_letters: DeadLetters | None = None,
        warnings: RateLimitedLog | None = None,
    ) -> None:
        self._auditor = auditor
        self._pipeline = pipeline
        self._refs = refs
        self._deliver_errors = deliver_errors
        self._policy = unresolved or UnresolvedSettings()
        self._dead_letters = dead_letters
        self._warnings = warnings or RateLimitedLog(log)
        self._counters = {
            "reference.messages": 0,
            "reference.errors": 0,
            "reference.skipped": 0,
            "reference.dead.lettered": 0,
        }

    @classmethod
    def for_consumer(
        cls,
        settings: ConsumerSettings,
        librdkafka_conf: Mapping[str, Any],
        pipeline: ConsumerPipeline,
        refs: ReferenceFetcher,
        auditor: Auditor | None,
        logger: logging.Logger,
    ) -> EventHandler:
        """As a consumer with ``settings`` needs it: its dead letters go out with the client's own settings."""
        dlq = settings.unresolved.dead_letter_topic
        return cls(
            pipeline,
            refs,
            settings.deliver_errors,
            auditor,
            settings.unresolved,
            None if dlq is None else DeadLetters(dlq, librdkafka_conf),
            RateLimitedLog(logger, settings.warning_interval_s),
        )

    @property
    def warnings(self) -> RateLimitedLog:
        """The consumer's one rate limit on warnings (its ``warnings.suppressed`` counts them all)."""
        return self._warnings

    @property
    def counters(self) -> dict[str, int]:
        return {**self._counters, "warnings.suppressed": self._warnings.suppressed}

    def close(self) -> None:
        if self._dead_letters is not None:
            self._dead_letters.close()

    def handle(self, msg: Any, events: list[Event]) -> Message | None:
        """``msg`` is the record's librdkafka message; errors carry it in ``kafka_message``."""
        if len(events) == 1 and isinstance(events[0], (PlainMessage, ChunkCompleted)):  # the common case
            out: Message | None = self._deliver(msg, events[0])
        else:
            out = self._handle(msg, events)
        if out is not None and self._auditor is not None and out.error() is None:
            self._audit(out)
        return out

    def _audit(self, msg: Message) -> None:
        assert self._auditor is not None
        stamp = msg.timestamp()[1]
        key, value = msg.key(), msg.value()
        value_size = value.size if isinstance(value, PayloadStream) else len(value) if value is not None else 0
        size = (len(key) if key is not None else 0) + value_size
        self._auditor.record(msg.topic() or "", stamp if stamp > 0 else 0, 1, size, AuditType.SUCCESS)

    def _handle(self, msg: Any, events: list[Event]) -> Message | None:
        message: WholeMessage | None = None
        dropped_error: LargeMessageDroppedError | None = None
        for event in events:
            if isinstance(event, MessageDropped):
                self._warnings.warning(
                    f"dropped.{event.dropped.reason}",
                    "incomplete large message dropped (%s): %s",
                    event.dropped.reason,
                    event.dropped,
                )
                dropped_error = dropped_error or event.exception
            elif isinstance(event, InvalidRecord):
                event.exception.kafka_message = msg
                raise event.exception
            elif isinstance(
                event, WholeMessage
            ):  # CommitNeeded was answered before (gateway.consumer._record_processor)
                message = event
        if dropped_error is not None:
            dropped_error.kafka_message = msg
            raise dropped_error
        if message is None:
            return None
        if isinstance(message, ReferenceToResolve):
            return self._resolve(msg, message)
        return self._deliver(msg, message)

    @staticmethod
    def _deliver(msg: Any, message: WholeMessage) -> Message:
        """A plain or chunked message: the record's value and headers replaced only when they differ."""
        record = message.record
        if message.value is not record.value:
            msg.set_value(message.value)
        headers = message.headers if message.safe_offset == record.offset + 1 else with_safe_offset(message)
        if headers is not record.headers:
            msg.set_headers(headers)
        return msg  # type: ignore[no-any-return]

    def _resolve(self, msg: Any, message: ReferenceToResolve) -> Message | None:
        """An envelope record: fetch its payload and hand back the record with the payload as value."""
        if message.peer is not None:
            return self._resolve_peer(msg, message, message.peer)
        if message.envelope is None:  # the pipeline then says why
            return self._unresolved(msg, message, message.exception or EnvelopeFormatError(message.error or ""))
        topic = msg.topic()
        key = (topic, msg.partition(), message.record.offset)
        envelope = message.envelope
        try:
            payload = attempt(lambda: self._refs.resolve(key, envelope, topic=topic), self._policy)
        except GatewayError as exc:
            return self._unresolved(msg, message, exc)
        return self._resolved(msg, message, payload)

    def _resolve_peer(self, msg: Any, message: ReferenceToResolve, peer: PeerRecord) -> Message | None:
        """A record another library wrote: key and value as they resolve, that library's headers gone."""
        try:
            key, value = attempt(lambda: self._refs.resolve_peer(peer, topic=msg.topic()), self._policy)
        except GatewayError as exc:
            return self._unresolved(msg, message, exc)
        if key is not message.record.key:
            msg.set_key(key)
        return self._resolved(msg, message, value)

    def _resolved(self, msg: Any, message: ReferenceToResolve, value: bytes | PayloadStream | None) -> Message:
        msg.set_value(value)
        msg.set_headers(with_safe_offset(message))
        self._counters["reference.messages"] += 1
        return msg  # type: ignore[no-any-return]

    def _unresolved(self, msg: Any, message: WholeMessage, exc: GatewayError) -> Message | None:
        """By ``reference.error.policy``: pass the record over, or stop commits there and report it."""
        self._counters["reference.errors"] += 1
        exc.kafka_message = msg
        where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
        policy = self._policy.policy
        if policy is ErrorPolicy.SKIP:
            self._counters["reference.skipped"] += 1
            self._warnings.warning("reference.skipped", "unresolvable record %s skipped: %s", where, error_text(exc))
            return None
        if policy is ErrorPolicy.DEAD_LETTER and self._dead_letters is not None:
            try:
                self._dead_letters.send(msg, exc)
            except Exception as dlq_exc:  # noqa: BLE001 -- any failure: fall back to raising, nothing is lost
                log.error("record %s could not be dead-lettered (%s); raising it instead", where, dlq_exc)
            else:
                self._counters["reference.dead.lettered"] += 1
                self._warnings.warning(
                    "reference.dead.lettered",
                    "unresolvable record %s sent to %s: %s",
                    where,
                    self._dead_letters.topic,
                    error_text(exc),
                )
                return None
        # commits stop here until the application commits this message itself; the loop goes on
        self._pipeline.commits.hold((msg.topic(), msg.partition()), message.record.offset)
        if self._deliver_errors:
            msg.set_error(KafkaError(KafkaError._VALUE_DESERIALIZATION, error_text(exc)))
            return msg  # type: ignore[no-any-return]
        raise exc
