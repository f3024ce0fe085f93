"""Sweeping orphaned payloads: writes journalled as pending whose envelope never landed.

The producer marks every store write pending and clears the mark once Kafka acknowledged the
envelope, or deletes the payload when the send failed. A mark that outlives the grace period
therefore means the producer died between the write and the acknowledgement, or its rollback
failed. One narrow case remains: a crash after the acknowledgement but before the mark was
cleared. ``verify`` closes it by looking for the envelope in Kafka before deleting anything.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import GatewayError
from gateway.protocol.envelope import decode_envelope, looks_like_envelope

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    examined: int = 0
    deleted: list[str] = field(default_factory=list)
    landed: list[str] = field(default_factory=list)
    """Pending marks whose envelope was found in Kafka: the mark is cleared, the payload kept."""
    failed: list[str] = field(default_factory=list)


def sweep(
    stores: Mapping[str, Any],
    *,
    grace_ms: int,
    now_ms: int | None = None,
    landed: Callable[[str, str], bool] | None = None,
    dry_run: bool = False,
) -> SweepReport:
    """Delete payloads pending for longer than ``grace_ms``, unless ``landed(store, locator)`` says otherwise."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    report = SweepReport()
    for name, store in stores.items():
        for locator in store.list_pending(now - grace_ms + 1):
            report.examined += 1
            try:
                if landed is not None and landed(name, locator):
                    if not dry_run:
                        store.clear_pending(locator)
                    report.landed.append(locator)
                    continue
                if not dry_run:
                    store.delete(locator)
                report.deleted.append(locator)
            except GatewayError as exc:
                log.warning("could not sweep %s from %s: %s", locator, name, exc)
                report.failed.append(locator)
    return report


def envelope_locators(
    client_config: Mapping[str, Any], topics: Iterable[str], *, timeout: float = 30.0
) -> set[tuple[str, str]]:
    """Every ``(store, locator)`` that an envelope in ``topics`` points at, read from the start to the end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({**client_config, "group.id": f"gateway-gc-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    found: set[tuple[str, str]] = set()
    try:
        partitions: list[Any] = []
        for topic in sorted(set(topics)):
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None:
                continue
            for p in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                if high > low:
                    partitions.append(TopicPartition(topic, p, OFFSET_BEGINNING))
        if not partitions:
            return found
        consumer.assign(partitions)
        remaining = {(tp.topic, tp.partition) for tp in partitions}
        deadline = time.monotonic() + timeout
        while remaining and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    remaining.discard((msg.topic(), msg.partition()))
                continue
            value = msg.value()
            if looks_like_envelope(value):
                try:
                    envelope = decode_envelope(value)
                except GatewayError:
                    continue
                found.add((envelope.store, envelope.locator))
    finally:
        consumer.close()
    return found


def kafka_verifier(client_config: Mapping[str, Any], stores: Mapping[str, Any]) -> Callable[[str, str], bool]:
    """A ``landed`` callback that scans, once, the topics the pending locators name."""
    cache: dict[str, set[tuple[str, str]]] = {}

    def landed(store_name: str, locator: str) -> bool:
        topic = getattr(stores[store_name].validate_locator(locator), "topic", None)
        if topic is None:
            return False
        if topic not in cache:
            cache[topic] = envelope_locators(client_config, [topic])
        return (store_name, locator) in cache[topic]

    return landed
