"""The parts a ``HybridProducer`` drives, made and given to each other in one place, at construction.

Every collaborator is handed what it needs here (the outbox's ``send`` to both route writers, the
write window to the outbox and the reference writer), so none is wired in afterwards but the
outbox's listener, which is the reference writer made from the outbox's own ``send``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from gateway.clock import Clock
from gateway.core.outgoing import OutgoingMessage
from gateway.encryption import ReferenceEncryption
from gateway.health import StoreHealth
from gateway.policy import Policy
from gateway.producer._chunked_writer import ChunkedWriter
from gateway.producer._compaction import AdminDescriber, CleanupPolicies, CompactionGuard
from gateway.producer._config import ProducerSettings
from gateway.producer._metrics import ProducerMetrics
from gateway.producer._outbox import Outbox
from gateway.producer._route_choice import RouteChooser
from gateway.producer.reference.admission import PartitionCounts, ReferenceAdmission
from gateway.producer.reference.topic_warmup import TopicWarmup
from gateway.producer.reference.window import WriteWindow
from gateway.producer.reference.writer import ReferenceWriter
from gateway.store import Store


@dataclass(frozen=True, slots=True)
class ProducerParts:
    outbox: Outbox
    """The one way to librdkafka: records of every route in order, the write window and its time bound."""
    compaction: CompactionGuard
    warmup: TopicWarmup
    """librdkafka told of a topic ahead of its first large message (its leader looked up while other waits run)."""
    routes: RouteChooser
    admission: ReferenceAdmission
    metrics: ProducerMetrics
    chunks: ChunkedWriter
    references: ReferenceWriter


def make_parts(
    settings: ProducerSettings,
    conf: Mapping[str, Any],
    policy: Policy,
    stores: Mapping[str, Store],
    health: Mapping[str, StoreHealth],
    clock: Clock,
    encryption: ReferenceEncryption,
) -> ProducerParts:
    """The producer's parts for librdkafka's configuration ``conf`` (the gateway's own keys already taken out)."""
    window = WriteWindow(settings.write_window, stores, settings.write_linger_s)
    outbox = Outbox(conf, window, clock, settings.block_s, settings.commit_encoding)
    fmt = settings.reference_format
    journals = () if fmt.pointer else tuple(_journal_ahead(store, clock) for store in stores.values())
    warmup = TopicWarmup(outbox.list_topics, journals)  # a peer's format takes no ids from a batch
    check = settings.compaction_check
    refresh_s = settings.topic_config_refresh_s
    describer = AdminDescriber(conf, connect_now=True) if check else None  # connected before the first send
    policies = CleanupPolicies(describer, clock, refresh_s, ahead=warmup.touch) if describer else None
    compaction = CompactionGuard(policies, policy, stores, settings.segment_bytes)
    metrics = ProducerMetrics()
    chunks = ChunkedWriter(settings, outbox.send, metrics=metrics, clock=clock)
    references = ReferenceWriter(
        stores,
        health,
        outbox.send,
        fallback_cap=0 if fmt.pointer else settings.fallback_cap,  # a foreign reader reads no chunks
        max_payload=settings.max_reference_bytes,
        metrics=metrics,
        clock=clock,
        checksum=settings.checksum,
        compression=settings.compression,
        window=window,
        send_chunked=chunks.send,
        refuses_chunks=partial(_refuses_chunks, settings, compaction),
        encryption=encryption,
        warning_interval_s=settings.warning_interval_s,
        reference_format=fmt,
    )
    outbox.listener = references
    return ProducerParts(
        outbox,
        compaction,
        warmup,
        RouteChooser(settings, policy, compaction),
        ReferenceAdmission(settings, PartitionCounts(outbox.list_topics, clock)),
        metrics,
        chunks,
        references,
    )


__all__ = ["ProducerParts", "make_parts"]


def _journal_ahead(store: Store, clock: Clock) -> Callable[[str], None]:
    """``store.open_journal_batch`` of a topic, at the time it runs."""
    return lambda topic: store.open_journal_batch(topic, clock.wall_ms())


def _refuses_chunks(settings: ProducerSettings, compaction: CompactionGuard, message: OutgoingMessage) -> bool:
    """The reference writer's question when ``message``'s store is down: would chunks of it be compacted away?"""
    segment_size = settings.chunk_size_for(message.key_bytes, message.header_list)
    return compaction.refuses_chunks(message.topic, message.size, segment_size)
