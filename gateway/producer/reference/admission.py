"""What ``produce`` refuses on the reference route before the store write, because Kafka would refuse it after.

A plain record and the first segment of a chunked message are refused by librdkafka inside
``produce`` when they cannot fit (``MSG_SIZE_TOO_LARGE``) or name a partition the topic's metadata
does not have (``_UNKNOWN_PARTITION``): nothing was written anywhere. A reference message writes its
payload first, and its envelope would meet those refusals only afterwards, the payload then undone
again (or, in the write window, reported to ``on_delivery`` long after ``produce`` returned). So the
same questions are asked here first, with the same exception types the other routes raise:
:class:`~gateway.errors.RecordTooLargeError` for a key and headers that leave no room for the
envelope, ``KafkaException(_UNKNOWN_PARTITION)`` for a partition the brokers say does not exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from gateway.clock import Clock
from gateway.core.outgoing import OutgoingMessage
from gateway.core.route_choice import asks_partition_count, partition_missing
from gateway.producer._config import ProducerSettings

LOOKUP_TIMEOUT_S = 5.0
"""The longest one metadata request may hold ``produce``; without an answer the partition is not refused."""

RECHECK_S = 1.0
"""How soon a partition beyond the known count may ask the brokers again (partitions can be added)."""

REFRESH_S = 300.0
"""How long a topic's partition count is believed for partitions below it (partitions are never removed)."""


@dataclass(slots=True)
class _Count:
    partitions: int | None
    """None: the brokers could not say (topic not created yet, no answer in time)."""
    asked_at: float


class PartitionCounts:
    """Each topic's partition count as the brokers last gave it, asked only for an explicit partition.

    ``list_topics`` is librdkafka's (``Producer.list_topics(topic=, timeout=)``). A partition below the
    known count costs nothing; one at or beyond it asks again (at most every :data:`RECHECK_S` per
    topic), so a partition added since is found, and a topic the brokers cannot describe refuses nothing.
    """

    def __init__(self, list_topics: Callable[..., Any], clock: Clock) -> None:
        self._list_topics = list_topics
        self._clock = clock
        self._known: dict[str, _Count] = {}

    def check(self, topic: str, partition: int) -> None:
        """``KafkaException(_UNKNOWN_PARTITION)`` when the brokers say ``topic`` has no ``partition``."""
        if partition < 0:
            return
        count = self._count(topic, partition)
        if partition_missing(partition, count):
            raise KafkaException(
                KafkaError(
                    KafkaError._UNKNOWN_PARTITION,
                    f"Local: Unknown partition: topic {topic!r} has {count} partition(s), not {partition}; "
                    "refused before the store write",
                )
            )

    def _count(self, topic: str, partition: int) -> int | None:
        now = self._clock.monotonic()
        known = self._known.get(topic)
        if known is not None and not asks_partition_count(
            partition, known.partitions, now - known.asked_at, RECHECK_S, REFRESH_S
        ):
            return known.partitions
        count = self._ask(topic)
        self._known[topic] = _Count(count, now)
        return count

    def _ask(self, topic: str) -> int | None:
        try:
            metadata = self._list_topics(topic=topic, timeout=LOOKUP_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - no answer: Kafka decides at the envelope, as before
            return None
        described = metadata.topics.get(topic)
        if described is None or described.error is not None or not described.partitions:
            return None
        return len(described.partitions)


class ReferenceAdmission:
    """The checks a reference message passes before its payload is written."""

    def __init__(self, settings: ProducerSettings, partitions: PartitionCounts) -> None:
        self._settings = settings
        self._partitions = partitions

    def check(self, message: OutgoingMessage) -> None:
        self._settings.check_envelope_room(message.key_bytes, message.header_list)
        self._partitions.check(message.topic, message.partition)


__all__ = ["PartitionCounts", "ReferenceAdmission"]
