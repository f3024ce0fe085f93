"""Reading our own keys out of a confluent-kafka config dict.

The wrappers pop the keys they own and pass the rest to librdkafka untouched, the way
``SerializingProducer`` pops ``key.serializer``; librdkafka would reject unknown keys.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from gateway.settings import DEFAULT_MAX_MESSAGE_BYTES as DEFAULT_MAX_MESSAGE_BYTES
from gateway.settings import DEFAULT_MAX_PAYLOAD_BYTES as DEFAULT_MAX_PAYLOAD_BYTES
from gateway.settings import check_minimum, parse_choice
from gateway.settings import parse_bool as parse_bool
from gateway.settings import parse_int as parse_int

# The parsers and defaults are the settings schema's (:mod:`gateway.settings`); these names stay for code
# that reads a key the schema does not declare yet (a test in tests/unit/test_docs.py asks that it be declared).


def pop_bool(conf: MutableMapping[str, Any], key: str, default: bool) -> bool:
    return parse_bool(key, conf.pop(key, default))


def pop_int(conf: MutableMapping[str, Any], key: str, default: int, minimum: int | None = None) -> int:
    return check_minimum(key, parse_int(key, conf.pop(key, default)), minimum)


def pop_choice(conf: MutableMapping[str, Any], key: str, default: str, choices: tuple[str, ...]) -> str:
    return parse_choice(key, conf.pop(key, default), choices)


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
