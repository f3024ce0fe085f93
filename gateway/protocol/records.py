"""Plain record types the sans-IO core takes and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from gateway.protocol.headers import Headers

Bytes = bytes | bytearray | memoryview

TopicPartitionKey = tuple[str, int]
"""``(topic, partition)``: the one key every per-partition table of the library uses."""


class RouteKind(str, Enum):
    """How a message travels: as one record, as LinkedIn-compatible segments, or as an envelope to a store.

    A ``str`` enum so that metrics labels, span attributes and ``route="..."`` strings use the same words.
    """

    PLAIN = "plain"
    CHUNKED = "chunked"
    REFERENCE = "reference"


@dataclass(slots=True)
class OutRecord:
    """A record to produce: what ``MessageSplitterImpl`` returns as a ``ProducerRecord``.

    ``partition`` is ``None`` for "let the partitioner decide" (confluent-kafka's ``-1``) and
    ``timestamp`` is ``None`` for "broker/producer time" (confluent-kafka's ``0``).
    """

    topic: str
    partition: int | None
    timestamp: int | None
    key: Bytes | None
    value: Bytes | None
    headers: Headers = field(default_factory=list)


@dataclass(slots=True)
class Record:
    """One consumed record of a partition, as the consumer pipeline takes it.

    The partition travels beside it (the pipeline is fed per partition). ``key`` and the timestamp
    are carried so that the message a record completes can be emitted with them (LinkedIn's rule:
    key, offset and timestamp of the completing record); the pipeline never reads them.
    ``timestamp_type`` uses Kafka's ids (-1 none, 0 create time, 1 log-append time). Not frozen:
    one is made per consumed record, and a frozen dataclass is several times slower to build.
    """

    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    timestamp_type: int = 0
    timestamp_ms: int | None = None
