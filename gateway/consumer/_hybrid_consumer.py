"""``HybridConsumer``: a confluent-kafka ``Consumer`` that hands back whole messages.

Chunked, reference and plain records all come out of ``poll`` as ``confluent_kafka.Message``
objects: the record that completes a message, with ``set_value`` / ``set_headers`` applied (a
plain record untouched but for a ``_so`` header while a large message is pending, LinkedIn's rule).
Raw records wait in a local queue until ``poll`` hands one out: a message counts as delivered
(and committable) when the caller receives it, never earlier (:mod:`gateway.consumer.handoff` for
drivers that carry results to another thread).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Message
from confluent_kafka.error import KeyDeserializationError, ValueDeserializationError

from gateway import tracing
from gateway.auditing import Auditor
from gateway.consumer._commits import GroupCommits
from gateway.consumer._confluent_methods import ConfluentMethods
from gateway.consumer._events import EventHandler
from gateway.consumer._inbox import FlowControl, Inbox
from gateway.consumer._offsets import OffsetDriver
from gateway.consumer._record_processor import BatchFetcher, MessageCollector, RecordProcessor
from gateway.consumer.config import ConsumerSettings, parse_consumer_config
from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.consumer.handoff import Handoff
from gateway.consumer.resolver import Resolver
from gateway.core.pipeline import ConsumerPipeline
from gateway.encryption import KeyProvider, ReferenceEncryption
from gateway.errors import GatewayError
from gateway.librdkafka.group_offsets import group_offsets
from gateway.serialization import Deserializers
from gateway.store import Store, checked_stores

log = logging.getLogger(__name__)

_UNBOUNDED = 1 << 62
"""``poll()``'s room: one message, whatever its size."""


@dataclass(frozen=True, slots=True)
class ConsumerParts:
    """What a :class:`HybridConsumer` drives, each given the others it needs when it is made."""

    resolver: Resolver
    pipeline: ConsumerPipeline
    spans: tracing.ConsumerTelemetry
    """Process spans, ended when the application is back."""
    inbox: Inbox
    flow: FlowControl
    events: EventHandler
    offsets: OffsetDriver
    fetcher: BatchFetcher
    collector: MessageCollector
    handoff: Handoff


def make_parts(
    settings: ConsumerSettings,
    conf: dict[str, Any],
    stores: dict[str, Store],
    encryption: ReferenceEncryption,
    auditor: Auditor | None,
    deserializers: Deserializers,
    auto_commit_when_due: Callable[[], None],
) -> ConsumerParts:
    """The consumer's parts for librdkafka's configuration ``conf`` (the gateway's own keys taken out).

    Made in one place, each handed what it needs as it is made, so that none is wired in afterwards
    and the consumer's ``__init__`` is left with reading its configuration. The order is the one the
    parts need: librdkafka's consumer opens on a pipeline that exists, the commits on its client.
    """
    resolver = settings.resolver(stores, encryption)
    if auditor is not None:
        auditor.start()
    pipeline = settings.pipeline(awaits_commits=True, pauses=True)
    spans = tracing.ConsumerTelemetry(conf)
    inbox = Inbox.open(conf, settings.batch, ReferenceFetcher(resolver), settings.batch_bytes, pipeline)
    flow = FlowControl(inbox, pipeline)
    events = EventHandler.for_consumer(settings, conf, pipeline, inbox.refs, auditor, log)
    commits = GroupCommits(
        group_offsets(inbox.client), pipeline, settings.on_commit, events.warnings, encoding=settings.commit_encoding
    )
    offsets = OffsetDriver(pipeline, inbox, commits, flow, auto_offset_store=settings.auto_offset_store)
    keys_read = settings.peers is not None
    path = RecordProcessor(pipeline, events, offsets, inbox, stores, flow, spans, keys_read=keys_read)
    plain_runs = auditor is None  # an audited message is counted one by one, on the full path
    fetcher = BatchFetcher(
        inbox, pipeline, path, offsets, flow, events, auto_commit_when_due, plain_runs_allowed=plain_runs
    )
    collector = MessageCollector(inbox, pipeline, path, fetcher, deserializers, auto_commit_when_due)
    handoff = Handoff(pipeline.progress, inbox.make_way_for_returned, pipeline.commits.floors)
    return ConsumerParts(resolver, pipeline, spans, inbox, flow, events, offsets, fetcher, collector, handoff)


# the stubs narrow three returns the C code does not (cluster_id, get_watermark_offsets, commit): ours keep its
class HybridConsumer(ConfluentMethods, Consumer):  # type: ignore[misc]
    """Drop-in for ``confluent_kafka.Consumer`` that reassembles and resolves large messages.

    A ``Consumer`` subclass, as ``DeserializingConsumer`` is, that overrides every method and drives
    its own librdkafka consumer (:attr:`inner`); its base handle is never opened. Our keys are in
    :mod:`gateway.consumer.config`, the rest go to librdkafka; keyword arguments add to ``config``.
    """

    # what poll() reads, in slots: on a subclass of a C type, instance-dict reads are twice as slow
    __slots__ = (
        "_auto_commit",
        "_collector",
        "_deserialize",
        "_deserializers",
        "_fetcher",
        "_handoff",
        "_inbox",
        "_spans",
    )

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        stores: Mapping[str, Store] | None = None,
        *,
        auditor: Auditor | None = None,
        key_provider: KeyProvider | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(config, Mapping) and not (config is None and kwargs):
            raise TypeError("expected configuration dict")  # confluent-kafka's words, for None and the like
        config = {**(config or {}), **kwargs}
        self._deserializers = Deserializers.pop_from(config)
        self._deserialize = bool(self._deserializers)  # read on every poll: an attribute, not a __bool__ call
        settings, conf = parse_consumer_config(config)
        if settings.on_commit is not None:
            conf["on_commit"] = self._on_commit
        self._auto_commit, self._auto_commit_s = settings.auto_commit, settings.auto_commit_s
        self._max_bytes = settings.consume_max_bytes
        self.stores: dict[str, Store] = checked_stores(stores)
        self._auditor = auditor
        encryption = ReferenceEncryption(key_provider)
        parts = make_parts(
            settings, conf, self.stores, encryption, auditor, self._deserializers, self._auto_commit_when_due
        )
        # each part an attribute of the consumer's own: poll() reads its slots one attribute away
        self._resolver = parts.resolver
        self._pipeline = parts.pipeline
        self._spans = parts.spans
        self._inbox = parts.inbox
        self._flow = parts.flow
        self._events = parts.events
        self._offsets = parts.offsets
        self._fetcher = parts.fetcher
        self._collector = parts.collector
        self._handoff = parts.handoff
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._closed = False

    # -- fetching and processing -------------------------------------------------------------
    def poll(self, timeout: float = -1) -> Message | None:
        """One whole message, an error event, or ``None`` when ``timeout`` passes. A record that cannot
        become a message raises a typed :class:`~gateway.errors.GatewayError` carrying it in ``kafka_message``
        (a refused deserialization confluent-kafka's ``Key/ValueDeserializationError``); the next goes on."""
        queue = self._inbox
        if (
            queue.counted.left
        ):  # the hottest path: the rest of a batch proven plain as a whole (gateway.consumer._inbox)
            head: Message = queue.take_counted()
            if self._auto_commit:
                self._auto_commit_when_due()
            return self._deserializers.apply(head) if self._deserialize else head
        if self._spans.held:  # the application is back: the messages it held are processed
            self._spans.release()
        if self._handoff.returned:  # what a driver handed over and got back goes first (gateway.consumer.handoff)
            return self._handoff.take_one()  # type: ignore[no-any-return]
        if queue.raw and self._fetcher.plain_runs_on and not queue.kept and queue.deferred is None:
            plain: Message | None = queue.take_plain_head()  # the hot path: delivered by bookkeeping alone
            if plain is not None:
                if self._auto_commit:
                    self._auto_commit_when_due()
                return self._deserializers.apply(plain) if self._deserialize else plain
        out: list[Message] = []
        self._collector.collect(out, 1, _UNBOUNDED, timeout)
        return out[0] if out else None

    def _auto_commit_when_due(self) -> None:
        if self._auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self._auto_commit_s
            self._offsets.commit_quietly(asynchronous=True)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to ``num_messages`` whole messages; waits ``timeout`` for the first only. An error raised
        after some were collected is kept and raised by the next call, so none of them is lost."""
        if not 0 <= num_messages <= 1_000_000:
            raise ValueError("num_messages must be between 0 and 1000000 (1M)")  # confluent-kafka's bound and words
        self._check_open()
        if self._spans.held:  # the application is back: the messages it held are processed
            self._spans.release()
        if num_messages == 0:
            return []
        if self._handoff.returned:
            return self._handoff.take(num_messages)
        # where commits stand, should a refusal keep some back
        before = self._pipeline.progress() if self._deserialize else None
        out: list[Message] = []
        try:
            self._collector.collect_for_consume(out, num_messages, self._max_bytes, timeout)
        except (GatewayError, KeyDeserializationError, ValueDeserializationError) as exc:
            if before is not None:  # delivered, not received: kept for the next calls
                self._collector.keep_refused(before)
            if not out:
                raise
            self._inbox.defer(exc)
        return out
