"""What a store write's answer leads to: its envelope produced, or the fallback (chunked, or refused).

One place for both ends of a write, whichever way it was made (in ``produce``, confirmed later from
the outbox's queue, or a stream's upload): the writer (:mod:`gateway.producer.reference.writer`)
decides *how* a payload is written; this decides what its success or failure does to the store's
health, the metrics, Kafka and the open transaction. Kept apart so the writer's one concern is the
write itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gateway.clock import Clock
from gateway.core.outgoing import OutgoingMessage, Send
from gateway.core.routes import envelope_record
from gateway.errors import StoreError, StoreUnavailableError
from gateway.health import StoreHealth
from gateway.policy import CHUNKED, Route
from gateway.producer._metrics import ProducerMetrics
from gateway.producer.reference._envelope_delivery import EnvelopeDelivery
from gateway.producer.reference._fallback import FallbackGuard
from gateway.producer.reference.transactions import TransactionLedger
from gateway.producer.reference.window import WriteInFlight
from gateway.protocol.envelope import Envelope
from gateway.protocol.peers.pointer_formats import ReferenceFormat


class WriteOutcomes:
    """A write that succeeded becomes its envelope (sent by ``send``, in the write's turn); one that failed
    for want of its store goes chunked (``send_chunked``) when the fallback guard allows, else raises."""

    def __init__(
        self,
        health: Mapping[str, StoreHealth],
        send: Send,
        reports: EnvelopeDelivery,
        transaction: TransactionLedger,
        fallbacks: FallbackGuard,
        *,
        metrics: ProducerMetrics,
        clock: Clock,
        send_chunked: Callable[[OutgoingMessage], None],
        refuses_chunks: Callable[[OutgoingMessage], bool],
        reference_format: ReferenceFormat,
    ) -> None:
        self._health = health
        self._send = send
        self._reports = reports
        self._transaction = transaction
        self._fallbacks = fallbacks
        self._metrics = metrics
        self._clock = clock
        self._send_chunked = send_chunked
        self._refuses_chunks = refuses_chunks
        """Whether a message may not fall back to chunks for its topic's sake (compaction), asked only when
        a fallback comes up, so that no write waits for what the answer needs (a ``cleanup.policy``)."""
        self._format = reference_format

    @property
    def fallback_cap(self) -> int:
        """``reference.fallback.inline.max.bytes``: the largest message sent inline when its store is down."""
        return self._fallbacks.cap

    def succeeded(self, write: WriteInFlight) -> None:
        """The store has the payload: its envelope goes to Kafka now (the write's turn), tracked for rollback."""
        put_seconds = self._clock.monotonic() - write.started
        self._metrics.store_put(write.name, put_seconds)
        self._health[write.name].success(write.sent_ms + int(put_seconds * 1000))
        message, digest = write.message, write.digest
        fields = Envelope(
            write.name,
            write.locator,
            digest.size,  # the application's size, or the sealed bytes' when sealed
            digest.result(),
            write.message_id,
            checksum=digest.checksum,
            compression=digest.compression,
            encryption=digest.encryption,
        )
        record = envelope_record(message, fields, self._format)
        record["on_delivery"] = self._reports.callback(
            write.store, write.locator, message.payload, message.header_list, message.on_delivery
        )
        try:
            self._send(message.topic, record)
        except BaseException as exc:  # not even queued: the payload is deleted before raising
            self._reports.rollback(write.store, write.locator, exc)
            raise
        self._transaction.wrote(write.store, write.locator)
        self._metrics.reference(write.name, message.size, len(record["value"]) + message.key_size)

    def failed(self, name: str, forced: bool, message: OutgoingMessage, now: int, exc: StoreError) -> Route:
        """Count the failure; sent chunked (``CHUNKED``) when the store is unavailable and the message may
        fall back, else raise."""
        self._metrics.store_put_failures += 1
        self._health[name].failure(now)
        if isinstance(exc, StoreUnavailableError) or isinstance(exc.__cause__, OSError):
            return self.fallback(name, forced, message, f"failed: {exc}", exc)
        raise exc

    def fallback(
        self, name: str, forced: bool, message: OutgoingMessage, why: str, cause: BaseException | None = None
    ) -> Route:
        """The one fallback path: the message goes chunked now, in its turn, or the refusal is raised.

        Whether the store was found down before the write (health), by the write in ``produce``, or
        by a write confirmed later from the window, this is where it is done; the guard decides.
        """
        refused = forced or self._refuses_chunks(message)  # a compacted topic's: as if forced
        self._fallbacks.check(name, refused, message.topic, message.size, why, cause)
        self._send_chunked(message)
        return CHUNKED


__all__ = ["WriteOutcomes"]
