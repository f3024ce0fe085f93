"""Reading our own keys out of a confluent-kafka config dict.

The wrappers pop the keys they own and pass the rest to librdkafka untouched, the way
``SerializingProducer`` pops ``key.serializer``; librdkafka would reject unknown keys.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
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


def parse_int(key: str, value: Any) -> int:
    """A config integer: an ``int``, a whole ``float`` or integer text; never a fraction silently cut.

    ``int(800000.5)`` would quietly become 800000 and ``int(True)`` 1, so both are refused by name.
    """
    if isinstance(value, bool):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        raise ValueError(f"{key} must be a whole number, got {value!r}")
    try:
        return int(str(value).strip())
    except ValueError as exc:
        raise ValueError(f"{key} must be an integer, got {value!r}") from exc


def pop_int(conf: MutableMapping[str, Any], key: str, default: int, minimum: int | None = None) -> int:
    number = parse_int(key, conf.pop(key, default))
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
    return parse_int(key, conf.get(key, default))


SECRET_KEY_PARTS = (
    "password",
    "secret",
    "token",
    "credential",
    "private.key",
    "key.pem",
    "sasl.jaas.config",
    "connection.string",
)
"""Config keys whose values are secrets wherever they are shown: librdkafka's ``sasl.password``,
``ssl.key.password``, ``ssl.keystore.password``, ``sasl.oauthbearer.client.secret``,
``ssl.key.pem``, AWS's ``secret.access.key`` and ``session.token``, an Azure connection string (it holds
the account key), and the like."""

MASK = "***"


def is_secret_key(key: str) -> bool:
    """Whether a configuration key names a secret (case-insensitive, ``_`` read as ``.``)."""
    name = key.lower().replace("_", ".")
    return any(part in name for part in SECRET_KEY_PARTS)


def mask_url(url: object) -> str:
    """``url`` with its password (and any ``password=`` / ``token=`` query value) replaced by ``***``.

    For every URL that reaches an error, a log line or a ``repr``: ``redis://user:pw@host`` becomes
    ``redis://user:***@host``. Not a URL, or not parseable: shown with everything after a ``:``
    up to the ``@`` masked, which is the only part of a DSN that can hold a password.
    """
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    text = str(url)
    try:
        parts = urlsplit(text)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, host = netloc.rpartition("@")
            user, colon, _ = userinfo.partition(":")
            netloc = f"{user}{colon and ':' + MASK}@{host}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            query = urlencode([(k, MASK if is_secret_key(k) else v) for k, v in pairs], safe="*")
        if "://" not in text:
            return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
        tail = (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")
        return f"{parts.scheme}://{netloc}{parts.path}{tail}"
    except ValueError:
        head, at, tail = text.rpartition("@")
        if not at:
            return text
        scheme, sep, rest = head.partition("://")
        user = rest.partition(":")[0] if sep else ""
        return f"{scheme}{sep}{user}:{MASK}@{tail}"


def redact_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client configuration fit for a log line or a ``repr``: secret values and URL passwords masked."""
    out: dict[str, Any] = {}
    for key, value in conf.items():
        if is_secret_key(str(key)):
            out[key] = MASK
        elif isinstance(value, str) and "://" in value and "@" in value:
            out[key] = mask_url(value)
        else:
            out[key] = value
    return out
