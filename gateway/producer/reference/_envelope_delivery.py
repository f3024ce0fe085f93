"""What an envelope's delivery report means for its payload: clear the pending mark, undo the write, or leave it for gc.

**Acknowledged.** The payload is live; its pending mark is cleared, but not one by one (that would
cost a store round trip per message, as much as the write itself): marks are queued and cleared in
one call per store when ``poll``/``flush`` returns, or once :data:`CLEAR_MARKS_EVERY` pile up. The
window in which a crash leaves a mark on a landed payload stays one ``poll`` call long, and
``gateway gc --bootstrap`` keeps such payloads.

**Refused, certainly.** The store write is undone. librdkafka knows per message whether a failed
record may still be in the topic (``rd_kafka_message_status``), but confluent-kafka-python 2.x does
not expose it on the ``Message`` given to ``on_delivery``, so the answer is taken from the error code
alone: :data:`NOT_PERSISTED_CODES` is an allow-list of codes where nothing was written (the broker
refused the whole batch before appending it, or librdkafka never sent it).

**Any other failure** (a timeout after the request went out, a broker that appended and then lost
its replicas, a code added by a later version) may have left the envelope in the topic, and deleting
the payload would turn it into a dangling reference: payload and pending mark stay, and
``gateway gc`` decides from the topic.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError

from gateway.core.outgoing import DeliveryCallback
from gateway.producer._delivery_error import report
from gateway.producer._metrics import ProducerMetrics
from gateway.protocol.headers import Headers
from gateway.store import Store

log = logging.getLogger("gateway.producer.reference.writer")

CLEAR_MARKS_EVERY = 512
"""Acknowledged writes whose pending marks are cleared at once even before the next ``poll``/``flush``."""

NOT_PERSISTED_CODES: frozenset[int] = frozenset(
    {
        # refused by the broker before any append
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.INVALID_MSG,
        KafkaError.INVALID_RECORD,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_TIMESTAMP,
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        KafkaError.UNSUPPORTED_COMPRESSION_TYPE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.POLICY_VIOLATION,
        KafkaError.NOT_ENOUGH_REPLICAS,  # checked before the append (unlike ..._AFTER_APPEND)
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        # decided locally, before the request was sent
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._QUEUE_FULL,
        KafkaError._PURGE_QUEUE,
        KafkaError._INVALID_ARG,
        KafkaError._BAD_MSG,
        KafkaError._AUTHENTICATION,
    }
)


def may_be_persisted(err: Any) -> bool:
    """True unless ``err`` is a failure that certainly left nothing in the topic.

    ``err`` is what librdkafka passes to ``on_delivery``: ``None`` (delivered: persisted), a
    ``KafkaError``, or anything else a wrapper might pass (treated as doubt).
    """
    if err is None:
        return True
    code = getattr(err, "code", None)
    if not callable(code):
        return True
    try:
        value = code()
    except Exception:  # noqa: BLE001 - an error we cannot read is doubt, never a licence to delete
        return True
    return not (isinstance(value, int) and value in NOT_PERSISTED_CODES)


class EnvelopeDelivery:
    """The delivery callbacks of envelopes, and the pending marks of acknowledged ones still to clear."""

    def __init__(self, metrics: ProducerMetrics) -> None:
        self.metrics = metrics
        self._acked: list[tuple[Store, str]] = []

    def __len__(self) -> int:
        """Acknowledged writes whose pending mark is still set."""
        return len(self._acked)

    def callback(
        self, store: Store, locator: str, value: bytes | None, headers: Headers, on_delivery: DeliveryCallback | None
    ) -> DeliveryCallback:
        """The envelope's ``on_delivery``: settles the payload, then tells the caller with its own value and headers."""

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self._acked.append((store, locator))
                if len(self._acked) >= CLEAR_MARKS_EVERY:
                    self.clear_marks()
            else:
                self.metrics.delivery_failures += 1
                if may_be_persisted(err):
                    self._keep_for_gc(locator, err)
                else:
                    self.rollback(store, locator, err)
            if on_delivery is not None:
                if msg is not None:  # the caller sees its own value and headers, not the envelope
                    msg.set_value(value)
                    msg.set_headers(headers)
                report(on_delivery, err, msg)

        return delivered

    def clear_marks(self) -> None:
        """One ``clear_pending_many`` per store (one round trip where it can batch); a failed one stays queued."""
        if not self._acked:
            return
        batches: dict[int, tuple[Store, list[str]]] = {}
        for store, locator in self._acked:
            batches.setdefault(id(store), (store, []))[1].append(locator)
        still: list[tuple[Store, str]] = []
        for store, locators in batches.values():
            try:
                store.clear_pending_many(locators)
            except Exception as exc:  # noqa: BLE001 - the payloads are live: keep the marks queued, never let gc guess
                log.warning("could not clear %d pending marks (will retry): %s", len(locators), exc)
                still.extend((store, locator) for locator in locators)
        self._acked = still

    def forget(self, writes: Iterable[tuple[Store, str]]) -> None:
        """Drop the queued marks of ``writes`` without clearing them.

        For the writes of an aborted transaction: their envelopes were aborted, so where deleting a
        payload failed its mark is what lets ``gateway gc`` find it; clearing it would leave the payload
        for ever.
        """
        drop = {(id(store), locator) for store, locator in writes}
        self._acked = [(store, locator) for store, locator in self._acked if (id(store), locator) not in drop]

    def rollback(self, store: Store, locator: str, cause: Any) -> None:
        """Delete a payload whose envelope certainly did not land; a failed delete leaves its mark for gc."""
        self.metrics.rollbacks += 1
        try:
            store.delete(locator)
        except Exception as exc:  # noqa: BLE001 - the pending mark stays, so gc will remove it
            self.metrics.rollback_failures += 1
            log.warning("rollback of %s after %s failed, left for gateway gc: %s", locator, cause, exc)

    def _keep_for_gc(self, locator: str, err: Any) -> None:
        """The envelope may be in the topic: deleting the payload could leave it dangling, so gc decides."""
        self.metrics.rollbacks_skipped += 1
        log.warning(
            "envelope for %s may have been written despite %s; payload and pending mark left for gateway gc",
            locator,
            err,
        )


__all__ = ["CLEAR_MARKS_EVERY", "NOT_PERSISTED_CODES", "EnvelopeDelivery", "may_be_persisted"]
