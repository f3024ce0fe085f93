"""The full path of one raw record in :class:`~gateway.consumer._hybrid_consumer.HybridConsumer`.

The consumer fetches records and hands messages out; every record its plain fast paths do not
take comes here, the one place that feeds a record to the sans-IO pipeline and acts on the events
it returns. The pipeline asks for a partition's commit (:class:`~gateway.core.events.CommitNeeded`)
before it judges the partition's first record, so that what it decides about delivery starts from
the committed position; the commits of every partition queued behind it are read in the same call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Message

from gateway import tracing
from gateway.consumer._events import EventHandler
from gateway.consumer._inbox import FlowControl, Inbox
from gateway.consumer._offsets import OffsetDriver
from gateway.core.events import CommitNeeded, WholeMessage
from gateway.core.pipeline import ConsumerPipeline
from gateway.errors import GatewayError
from gateway.protocol.records import Record
from gateway.store import Store


class RecordProcessor:
    """One raw record in, the message the application gets (or nothing) out.

    ``traced`` is set by the consumer with every fetched batch: a traced message gets its span here.
    """

    def __init__(
        self,
        pipeline: ConsumerPipeline,
        events: EventHandler,
        offsets: OffsetDriver,
        queue: Inbox,
        stores: Mapping[str, Store],
        flow: FlowControl,
        spans: tracing.ConsumerTelemetry,
        *,
        keys_read: bool,
    ) -> None:
        self._pipeline = pipeline
        self._events = events
        self._offsets = offsets
        self._inbox = queue
        self._flow = flow
        self._stores = stores  # the consumer's own dict: a store added later is seen here too
        self._keys_read = keys_read
        self.traced = False
        self.spans = spans

    def handle(self, msg: Any) -> Message | None:
        if msg.error() is not None:
            return msg  # type: ignore[no-any-return]
        tp = (msg.topic(), msg.partition())
        # key and timestamp stay with msg; only a peer's record (bakdata) may need its key decoded
        record = Record(msg.offset(), msg.key() if self._keys_read else None, msg.value(), msg.headers())
        try:
            events = self._pipeline.feed(tp, record)
            if events and type(events[0]) is CommitNeeded:  # the partition's first record: nothing was done
                self._offsets.load_commits([msg, *self._inbox.raw])
                events = self._pipeline.feed(tp, record)
            self._flow.act(events)  # before anything else is taken from the queue
            out = self._events.handle(msg, events)
            if out is not None and self.traced:
                self.spans.consumed(out, *_span_fields(events))
            return out
        except GatewayError as exc:  # every typed error leaves with its record, nothing is lost
            if exc.kafka_message is None:
                exc.kafka_message = msg
            if self.traced:
                self.spans.failed(msg, exc)
            raise
        finally:  # after resolving, so a payload fetched ahead is used; also frees one never taken
            if self._stores:
                self._inbox.refs.done((tp[0], tp[1], record.offset))


def _span_fields(events: Sequence[Any]) -> tuple[str, str | None, int]:
    """Route, store and segment count of the whole message among ``events``, for its span."""
    whole = [e for e in events if isinstance(e, WholeMessage)]
    if not whole:
        return "plain", None, 1
    last = whole[-1]
    return last.route.value, last.envelope.store if last.envelope is not None else None, last.number_of_segments
