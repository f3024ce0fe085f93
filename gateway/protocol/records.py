"""Plain record types the sans-IO core takes and returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.protocol.headers import Headers

Bytes = bytes | bytearray | memoryview


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


@dataclass(frozen=True, slots=True)
class InRecord:
    """A consumed record as the assembler sees it; ``raw`` is the I/O layer's own object, passed back untouched."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    timestamp: int = -1
    raw: object = None
