"""Reading our own keys out of a confluent-kafka config dict.

The wrappers pop the keys they own and pass the rest to librdkafka untouched, the way
``SerializingProducer`` pops ``key.serializer``; librdkafka would reject unknown keys.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

DEFAULT_MAX_MESSAGE_BYTES = 32_000_000
"""The largest chunked message a default producer writes (``large.message.max.bytes``) and a default
consumer reassembles (``message.assembler.buffer.capacity``, hence ``message.assembler.max.message.bytes``).

One default for both ends, so that what a default producer accepts a default consumer delivers: a
consumer holds a chunked message whole in its buffer, and a larger one would fail on every poll.
"""

DEFAULT_MAX_PAYLOAD_BYTES = 2_000_000_000
"""The largest referenced payload a default producer writes and a default consumer reads
(``reference.max.payload.bytes`` on both): below 2 GiB, the most one Spark row (an Arrow binary cell) holds."""


def parse_bool(key: str, value: Any, error: type[Exception] = ValueError) -> bool:
    """A config boolean as Kafka clients accept it: a bool, or true/false (1/0, yes/no, on/off) as text."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise error(f"{key} must be true or false, got {value!r}")


def pop_bool(conf: MutableMapping[str, Any], key: str, default: bool) -> bool:
    return parse_bool(key, conf.pop(key, default))


def pop_int(conf: MutableMapping[str, Any], key: str, default: int, minimum: int | None = None) -> int:
    value = conf.pop(key, default)
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{key} must be an integer, got {value!r}") from exc
    if minimum is not None and number < minimum:
        raise ValueError(f"{key} must be >= {minimum}, got {number}")
    return number


def pop_choice(conf: MutableMapping[str, Any], key: str, default: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (case-insensitive), naming them all when the value is none of them."""
    value = str(conf.pop(key, default)).strip().lower()
    if value not in choices:
        raise ValueError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def peek_int(conf: MutableMapping[str, Any], key: str, default: int) -> int:
    """A librdkafka key we need to know but must leave in place."""
    value = conf.get(key, default)
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{key} must be an integer, got {value!r}") from exc
