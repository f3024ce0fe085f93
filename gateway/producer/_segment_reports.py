"""Folding per-segment delivery reports into one report per logical message (LinkedIn's ``LargeMessageCallback``).

A chunked message is n records, and librdkafka reports each; the caller asked for one
``on_delivery`` call. :class:`DeliveryFold` is that fold for one message and does no I/O, so its
rules are unit-tested alone. :class:`InFlight` keeps the producer-wide counts that make
``len(producer)`` count logical messages; it takes a lock because delivery reports may be served
on another thread than the one calling ``produce``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gateway.core.outgoing import DeliveryCallback
from gateway.errors import LargeMessageSendError
from gateway.producer._delivery_error import report
from gateway.protocol.headers import Headers


class DeliveryFold:
    """Reports for ``total`` segments in, one ``on_delivery(err, msg)`` out.

    The callback gets the message's last report with value, key and headers set back to what the
    caller passed, and on any failure a ``KafkaError`` with the first error's code
    (:mod:`gateway.producer._delivery_error`) whose ``cause`` is a :class:`LargeMessageSendError`
    carrying that error and how many segments made it ("Sent N of M segments").
    """

    __slots__ = ("acked", "failed", "first_error", "headers", "key", "on_delivery", "silent", "total", "value")

    def __init__(
        self,
        total: int,
        on_delivery: DeliveryCallback | None,
        value: bytes | None,
        key: Any,
        headers: Headers,
    ) -> None:
        self.total = total
        self.on_delivery = on_delivery
        self.value = value
        self.key = key
        self.headers = headers
        self.acked = 0
        self.failed = 0
        self.first_error: Any = None
        self.silent = False
        """Set when ``produce`` raised for this message: the caller has its answer and gets no callback."""

    @property
    def complete(self) -> bool:
        return self.acked + self.failed >= self.total

    def segment(self, err: Any) -> bool:
        """Count one segment's report; True when it was the last one expected."""
        if err is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = err
        else:
            self.acked += 1
        return self.complete

    def abandon(self, sent: int) -> bool:
        """Only ``sent`` segments were queued and ``produce`` raised; True when no report is still due."""
        self.total = sent
        self.silent = True
        return sent == 0 or self.complete

    def error(self) -> LargeMessageSendError | None:
        """The aggregated failure, or None when every segment was acknowledged."""
        if not self.failed:
            return None
        return LargeMessageSendError(
            f"Error when sending large message. Sent {self.acked} of {self.total} segments.",
            self.first_error,
            self.acked,
            self.total,
        )

    def deliver(self, msg: Any) -> None:
        """Call the caller's ``on_delivery`` once, with the whole message's value, key and headers restored."""
        if self.silent or self.on_delivery is None:
            return
        error = self.error()
        if msg is not None:
            msg.set_value(self.value)
            msg.set_key(self.key)
            msg.set_headers(self.headers)
        report(self.on_delivery, error, msg)  # a KafkaError, its cause the LargeMessageSendError


class InFlight:
    """Logical messages and their segments between ``produce`` and their last delivery report."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.messages = 0
        self.segments = 0

    def begin(self, fold: DeliveryFold) -> None:
        with self._lock:
            self.messages += 1
            self.segments += fold.total

    def segment_done(self, fold: DeliveryFold, err: Any) -> bool:
        """Record one report; True when the message is complete and its callback is due."""
        with self._lock:
            self.segments -= 1
            complete = fold.segment(err)
            if complete:
                self.messages -= 1
            return complete

    def abandon(self, fold: DeliveryFold, sent: int) -> None:
        """Count down the segments that were never queued (the caller got an exception instead)."""
        with self._lock:
            self.segments -= fold.total - sent
            if fold.abandon(sent):
                self.messages -= 1

    def logical(self, queued_records: Callable[[], int]) -> int:
        """Logical messages still in flight, given librdkafka's count of records in flight."""
        with self._lock:
            return max(0, queued_records() - self.segments + self.messages)
