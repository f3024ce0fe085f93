"""One message as the caller handed it to ``produce``, carried as a single value through every route.

The plain route must pass the caller's own objects to librdkafka untouched (a ``str`` value stays a
``str``), while the chunked and reference routes need bytes; so the value keeps both forms: the
arguments as given, and ``payload``, the value as bytes, converted once.

Every argument is checked and converted in :meth:`OutgoingMessage.of`, before any route runs: the
reference route writes to a store first, and an argument refused after that write would orphan
the payload.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gateway.errors import ConfigurationError
from gateway.protocol.envelope import ENVELOPE_HEADER
from gateway.protocol.headers import LM_HEADER, SAFE_OFFSET_HEADER, TIMESTAMP_HEADER, Header, Headers

DeliveryCallback = Callable[[Any, Any], None]

Send = Callable[[str, dict[str, Any]], None]
"""Queue one record: ``producer.produce(topic, **kwargs)``, waiting while the local queue is full."""


RESERVED_HEADERS = frozenset({ENVELOPE_HEADER, LM_HEADER, TIMESTAMP_HEADER, SAFE_OFFSET_HEADER})
"""Header names the gateway writes and reads itself; a record carrying one of them from the caller
would be taken for a segment or an envelope by every consumer, so ``produce`` refuses them."""


def as_bytes(value: Any, what: str = "value") -> bytes | None:
    """``value`` as bytes; ``TypeError`` naming ``what`` for anything librdkafka would not take."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes or str, got {type(value).__name__}")


def headers_list(headers: Any) -> Headers:
    """Headers given as a dict or a list of pairs, as the list of ``(name, bytes)`` the protocol writes.

    ``TypeError`` names the header whose value is not bytes, str or None, or says what is wrong with
    ``headers`` itself.
    """
    if headers is None:
        return []
    if isinstance(headers, Mapping):
        items = list(headers.items())
    elif isinstance(headers, (list, tuple)):
        items = list(headers)
    else:
        raise TypeError(f"headers must be a dict or a list of (name, value) pairs, got {type(headers).__name__}")
    out: Headers = []
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError(f"headers must be (name, value) pairs, got {item!r:.80}")
        name = str(item[0])
        out.append((name, as_bytes(item[1], f"header {name!r}")))
    return out


def checked_headers(headers: Any) -> tuple[Header, ...]:
    """:func:`headers_list`, refusing the gateway's reserved names with :class:`ConfigurationError`."""
    items = headers_list(headers)
    reserved = sorted({name for name, _ in items if name in RESERVED_HEADERS})
    if reserved:
        raise ConfigurationError(
            f"headers {reserved} are reserved for the gateway's own segments and envelopes "
            f"({', '.join(sorted(RESERVED_HEADERS))}); a consumer would misread the record. Remove them "
            "(e.g. when re-producing a consumed message)"
        )
    return tuple(items)


def _check_partition(partition: Any) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(f"partition must be an int, got {type(partition).__name__}")
    if partition < -1:
        raise ConfigurationError(f"partition must be -1 (any) or a partition number >= 0, got {partition}")
    return partition


def accepted_as_is(topic: Any, key: Any, partition: Any, timestamp: Any, on_delivery: Any) -> bool:
    """True when :meth:`OutgoingMessage.of` would take these arguments unchanged and raise nothing.

    The producer's direct path for small plain records asks this instead of building the message;
    False says only "ask :meth:`OutgoingMessage.of`", which converts what it can or raises.
    Kept beside it so that both follow one rule.
    """
    return (
        type(topic) is str
        and topic != ""
        and (key is None or type(key) is bytes)
        and type(partition) is int
        and partition >= -1
        and type(timestamp) is int
        and (on_delivery is None or callable(on_delivery))
    )


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
    key_data: bytes | None = None
    """``key`` as bytes."""
    header_items: tuple[Header, ...] = ()
    """``headers`` as ``(name, bytes)`` pairs, checked."""

    @classmethod
    def of(
        cls,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> OutgoingMessage:
        """``produce``'s arguments, each checked: ``TypeError``/:class:`ConfigurationError` name the argument."""
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r:.80}")
        if on_delivery is not None and not callable(on_delivery):
            raise TypeError(f"on_delivery must be callable(err, msg) or None, got {type(on_delivery).__name__}")
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise TypeError(f"timestamp must be an int (ms since the epoch), got {type(timestamp).__name__}")
        return cls(
            topic,
            value,
            as_bytes(value),
            key,
            _check_partition(partition),
            on_delivery,
            timestamp,
            headers,
            as_bytes(key, "key"),
            checked_headers(headers),
        )

    @property
    def size(self) -> int:
        """Bytes of the value: what policies and the fallback cap compare."""
        return 0 if self.payload is None else len(self.payload)

    @property
    def key_bytes(self) -> bytes | None:
        return self.key_data

    @property
    def key_size(self) -> int:
        """The key's length as the counters and the auditor count it (0 for a key that is neither bytes nor text)."""
        return len(self.key) if isinstance(self.key, (bytes, str)) else 0

    @property
    def header_list(self) -> Headers:
        """A fresh list each time: routes append their own headers to it."""
        return list(self.header_items)

    def timestamp_or_now(self, now_ms: Callable[[], int]) -> int:
        """The caller's timestamp, or now when the caller left it to the broker (0 or less)."""
        return self.timestamp if self.timestamp > 0 else now_ms()

    def stamped(self, now_ms: Callable[[], int]) -> OutgoingMessage:
        """This message with :meth:`timestamp_or_now` as its timestamp (no copy when it is the caller's)."""
        return self if self.timestamp > 0 else replace(self, timestamp=self.timestamp_or_now(now_ms))

    def with_callback(self, on_delivery: DeliveryCallback | None) -> OutgoingMessage:
        return replace(self, on_delivery=on_delivery)
