"""The chunked route: one message as LinkedIn segments, queued in order, reported back as one delivery.

Every segment shares the message's key, partition and timestamp (stamped here when the caller left
it to the broker, so that all segments and the ``_t`` header agree). A message is never left
half-queued without the caller knowing: if a later segment cannot be queued, ``send`` raises
:class:`LargeMessageSendError` naming how many went out, and no ``on_delivery`` follows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.core.outgoing import OutgoingMessage, Send
from gateway.errors import LargeMessageSendError
from gateway.producer._config import ProducerSettings
from gateway.producer._metrics import ProducerMetrics
from gateway.producer._segment_reports import DeliveryFold, InFlight
from gateway.protocol.headers import TIMESTAMP_HEADER, encode_timestamp, has_header
from gateway.protocol.primitives import random_uuid4
from gateway.protocol.records import OutRecord
from gateway.protocol.splitter import iter_split, split_count


class ChunkedWriter:
    def __init__(
        self,
        settings: ProducerSettings,
        send: Send,
        *,
        metrics: ProducerMetrics | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.metrics = metrics if metrics is not None else ProducerMetrics()
        self.in_flight = InFlight()
        self._send = send
        self._clock = clock

    def segments(self, message: OutgoingMessage) -> tuple[int, Iterator[OutRecord]]:
        """How many records ``message`` takes, and the records, made one at a time as they are queued.

        Segments are sized so each, with key and headers, fits ``message.max.bytes``.
        """
        settings = self.settings
        key_bytes = message.key_bytes
        hdrs = message.header_list
        timestamp = message.timestamp_or_now(self._clock.wall_ms)  # the message itself is not copied
        if settings.timestamp_header and not has_header(hdrs, TIMESTAMP_HEADER):
            hdrs.append((TIMESTAMP_HEADER, encode_timestamp(timestamp)))
        value = message.payload
        settings.check_segment_room(key_bytes, hdrs, message.size)
        segment_size = settings.segment_size_for(key_bytes, hdrs)
        if settings.wrap_small and value is not None and len(value) <= segment_size:
            segment_size = max(1, len(value))
        count = split_count(value, segment_size)
        settings.check_chunked_size(message.size, count)
        partition = message.partition if message.partition >= 0 else None
        records = iter_split(
            message.topic,
            partition,
            timestamp,
            random_uuid4(),
            key_bytes,
            value,
            segment_size,
            hdrs,
            header_only=settings.header_only,
        )
        return count, records

    def send(self, message: OutgoingMessage) -> None:
        """Queue every segment; ``BufferError`` if the first does not fit, else :class:`LargeMessageSendError`."""
        count, records = self.segments(message)
        fold = DeliveryFold(count, message.on_delivery, message.payload, message.key, message.header_list)
        self.in_flight.begin(fold)
        sent = kafka_bytes = 0
        try:
            for record in records:
                kwargs = self._segment_kwargs(record, fold)
                self._send(message.topic, kwargs)
                kafka_bytes += len(kwargs["value"] or b"") + len(kwargs["key"] or b"")
                sent += 1
                del record, kwargs  # librdkafka has its copy: let the segment go before the next is built
        except BaseException as exc:
            self.in_flight.abandon(fold, sent)
            if sent == 0 or not isinstance(exc, Exception):
                raise  # nothing queued; or Ctrl-C / SIGTERM, which the caller must get as itself
            raise LargeMessageSendError(
                f"Error when sending large message. Queued {sent} of {count} segments; "
                "consumers will expire the partial message.",
                exc,
                sent,
                count,
            ) from exc
        self.metrics.chunked(message, count, kafka_bytes)

    def _segment_kwargs(self, record: OutRecord, fold: DeliveryFold) -> dict[str, Any]:
        return {
            "value": record.value if record.value is None or isinstance(record.value, bytes) else bytes(record.value),
            "key": record.key if record.key is None or isinstance(record.key, bytes) else bytes(record.key),
            "partition": -1 if record.partition is None else record.partition,
            "timestamp": record.timestamp or 0,
            "headers": record.headers,
            "on_delivery": lambda err, msg: self._segment_delivered(fold, err, msg),
        }

    def _segment_delivered(self, fold: DeliveryFold, err: Any, msg: Any) -> None:
        if self.in_flight.segment_done(fold, err):
            if fold.failed:
                self.metrics.delivery_failures += 1
            fold.deliver(msg)
