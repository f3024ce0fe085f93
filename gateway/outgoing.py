"""One message as the caller handed it to ``produce``, carried as a single value through every route.

The plain route must pass the caller's own objects to librdkafka untouched (a ``str`` value stays a
``str``), while the chunked and reference routes need bytes; so the value keeps both forms: the
arguments as given, and ``payload``, the value as bytes, converted once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gateway.protocol.headers import Headers

DeliveryCallback = Callable[[Any, Any], None]

Send = Callable[[str, dict[str, Any]], None]
"""Queue one record: ``producer.produce(topic, **kwargs)``, waiting while the local queue is full."""


def as_bytes(value: Any) -> bytes | None:
    """``value`` as bytes; ``TypeError`` for anything librdkafka would not take as a value or key."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"value must be bytes or str, got {type(value).__name__}")


def headers_list(headers: Any) -> Headers:
    """Headers given as a dict or a list of pairs, as the list of ``(name, bytes)`` the protocol writes."""
    if headers is None:
        return []
    items = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    return [(str(k), as_bytes(v)) for k, v in items]


def headers_size(headers: Sequence[tuple[str, bytes | None]]) -> int:
    """An upper bound of the bytes the headers take in a record (name, value and varint framing)."""
    return sum(len(k) + (len(v) if v is not None else 0) + 10 for k, v in headers)


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """``produce``'s arguments for one logical message."""

    topic: str
    value: Any
    """As the caller gave it; only the plain route sends it as it is."""
    payload: bytes | None
    """``value`` as bytes (``None`` for a tombstone)."""
    key: Any = None
    partition: int = -1
    on_delivery: DeliveryCallback | None = None
    timestamp: int = 0
    headers: Any = None

    @classmethod
    def of(
        cls, topic: str, value: Any = None, key: Any = None, partition: int = -1,
        on_delivery: DeliveryCallback | None = None, timestamp: int = 0, headers: Any = None,
    ) -> OutgoingMessage:
        """The message for ``produce``'s arguments; a value that is not bytes or text is refused here."""
        return cls(topic, value, as_bytes(value), key, partition, on_delivery, timestamp, headers)

    @property
    def size(self) -> int:
        """Bytes of the value: what policies and the fallback cap compare."""
        return 0 if self.payload is None else len(self.payload)

    @property
    def key_bytes(self) -> bytes | None:
        return as_bytes(self.key)

    @property
    def key_size(self) -> int:
        """The key's length as the counters and the auditor count it (0 for a key that is neither bytes nor text)."""
        return len(self.key) if isinstance(self.key, (bytes, str)) else 0

    @property
    def header_list(self) -> Headers:
        return headers_list(self.headers)

    def stamped(self, now_ms: Callable[[], int]) -> OutgoingMessage:
        """This message with its timestamp set to now when the caller left it to the broker (0 or less)."""
        return self if self.timestamp > 0 else replace(self, timestamp=now_ms())

    def with_callback(self, on_delivery: DeliveryCallback | None) -> OutgoingMessage:
        return replace(self, on_delivery=on_delivery)
