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
