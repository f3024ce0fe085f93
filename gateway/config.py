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
    "oauthbearer.config",
    "connection.string",
)
"""Config keys whose values are secrets wherever they are shown: librdkafka's ``sasl.password``,
``ssl.key.password``, ``ssl.keystore.password``, ``sasl.oauthbearer.client.secret``,
``ssl.key.pem``, ``sasl.oauthbearer.config`` (it holds ``clientSecret=``), AWS's ``secret.access.key`` and
``session.token``, an Azure connection string (it holds the account key), and the like."""

MASK = "***"


def is_secret_key(key: str) -> bool:
    """Whether a configuration key names a secret (case-insensitive, ``_`` read as ``.``)."""
    name = key.lower().replace("_", ".")
    return any(part in name for part in SECRET_KEY_PARTS)


def mask_url(url: object) -> str:
    """``url`` with its password (and any ``password=`` / ``token=`` query value) replaced by ``***``.

    For every URL that reaches an error, a log line or a ``repr``: ``redis://user:pw@host`` becomes
    ``redis://user:***@host``. The password is everything from the first ``:`` after ``scheme://``
    to the **last** ``@``, whatever it holds: a password with an unencoded ``/``, ``?`` or ``#``
    ends a URL parser's authority early (urllib would call what follows a path, query or
    fragment), so parsing first would leave part of it on show. An ``@`` further on (in a query)
    only masks more. The user name before that first ``:`` stays; user info without a ``:`` is
    masked whole, since some write a bare token there. Without ``scheme://``, the same from the start.
    """
    text = str(url)
    scheme, sep, rest = text.partition("://")
    prefix, rest = (f"{scheme}://", rest) if sep else ("", text)
    userinfo, at, after = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        prefix += f"{user}:{MASK}@" if colon else f"{MASK}@"  # without a colon it may be a bare token
    else:
        after = rest
    return prefix + _mask_query(after)


def _mask_query(text: str) -> str:
    """``host/path?query#fragment`` with secret-named query values masked."""
    from urllib.parse import parse_qsl, urlencode

    base, question, tail = text.partition("?")
    if not question:
        return text
    query, hash_, fragment = tail.partition("#")
    pairs = parse_qsl(query, keep_blank_values=True)
    masked = urlencode([(k, MASK if is_secret_key(k) else v) for k, v in pairs], safe="*")
    return f"{base}?{masked}{hash_}{fragment}"


def check_url_userinfo(url: str, what: str) -> None:
    """Refuse a URL whose user name or password holds an unencoded ``/``, ``?`` or ``#``.

    A URL parser ends the host part at the first of these, so the password is read as a host and
    a port, and the parser's error quotes it (redis-py: "Port could not be cast to integer value as
    'pa'"). Refused here, before any parser sees it, with the URL masked and the remedy named.
    """
    from gateway.errors import ConfigurationError

    _, sep, rest = url.partition("://")
    userinfo = rest.rpartition("@")[0] if sep and not rest.startswith("/") else ""  # unix:///a@b.sock: a path
    if any(ch in userinfo for ch in "/?#"):
        raise ConfigurationError(
            f"{what} {mask_url(url)!r} cannot be parsed: its user name or password holds a '/', '?' or '#', "
            "which ends the host part of a URL; percent-encode them (/ as %2F, ? as %3F, # as %23, and "
            "@ as %40, : as %3A, % as %25), e.g. with urllib.parse.quote(password, safe='')"
        )


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
