"""Commit metadata: ``"<consumer high watermark>,<user metadata>"``.

LinkedIn's consumer commits the *safe* offset and hides the user-visible offset (its "high
watermark") in front of the user's metadata. Speaking the same form lets a Java LiKafkaConsumer
and a HybridConsumer take over each other's group without re-delivering or skipping.

On the wire the metadata is a Kafka STRING: UTF-8 bytes with a length, no terminator. Java writes
``String.getBytes(UTF_8)``; :func:`encode_metadata` writes the same. A commit is sent as
:func:`commit_metadata` encodes it: by default with one NUL at its end, since confluent-kafka reads
stored metadata as a C string out of a copy librdkafka leaves unterminated, and reads past the end
of metadata that holds no NUL of its own. LinkedIn's parser never sees that NUL in the high
watermark (it reads up to the first comma). What comes back is read by :func:`read_metadata`,
which takes any bytes a broker can hold: other clients commit other things (Kafka Streams base64,
Flink, nothing at all), and only LinkedIn's form says where a restart stands.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import Enum

from gateway.protocol.primitives import INT64_MAX, INT64_MIN

# Long.parseLong: optional sign, then digits (Java accepts any Unicode digit, as Python's \d does).
_JAVA_LONG = re.compile(r"[+-]?\d+")


def wrap_metadata(high_watermark: int, user_metadata: str | None) -> str:
    """``LiKafkaClientsUtils.wrapMetadataWithOffset``; ``None`` becomes the literal ``"null"`` as in Java."""
    return f"{high_watermark},{'null' if user_metadata is None else user_metadata}"


def _parse_java_long(text: str) -> int | None:
    if not _JAVA_LONG.fullmatch(text):
        return None
    sign = text[0] if text[0] in "+-" else ""
    digits = "".join(str(unicodedata.decimal(ch)) for ch in text[len(sign) :]).lstrip("0")
    if len(digits) > 19:  # past int64 whatever follows; and int() refuses over 4300 digits
        return None
    value = int(sign + (digits or "0"))
    return value if INT64_MIN <= value <= INT64_MAX else None


def offset_from_metadata(metadata: str | None) -> int | None:
    """The high watermark before the first comma, or ``None`` if there is no comma or no valid long."""
    if metadata is None:
        return None
    head, comma, _ = metadata.partition(",")
    return _parse_java_long(head) if comma else None


def user_metadata_from(metadata: str | None) -> str | None:
    """Everything after the first comma, or the whole string when there is no comma."""
    if metadata is None:
        return None
    head, comma, tail = metadata.partition(",")
    return tail if comma else head


@dataclass(frozen=True, slots=True)
class StoredMetadata:
    """A committed offset's metadata as the consumer reads it.

    ``high_watermark`` comes from LinkedIn's form only. ``user`` is what ``committed()`` shows:
    the text after the first comma (LinkedIn's form) or the whole text (any other), decoded as a
    Java client decodes it (malformed UTF-8 becomes U+FFFD) and cut at the first NUL, since
    confluent-kafka's ``TopicPartition.metadata`` is a C string and cannot hold one.
    """

    high_watermark: int | None
    user: str | None
    size: int
    """How many bytes the broker holds."""

    @property
    def foreign(self) -> bool:
        """Stored, but not in LinkedIn's form: it says nothing about where a restart stands."""
        return self.high_watermark is None and self.user is not None


NO_METADATA = StoredMetadata(None, None, 0)
"""Nothing committed (or a null STRING)."""


def encode_metadata(text: str) -> bytes:
    """The bytes a Java client commits for ``text``: UTF-8, no terminator."""
    return text.encode("utf-8")


class CommitEncoding(Enum):
    """How a commit's ``"<HW>,<user metadata>"`` goes on the wire (``commit.metadata.encoding``)."""

    NUL_TERMINATED = "nul-terminated"
    """UTF-8 and one NUL: every reader reads it (confluent-kafka's ``committed()`` and
    ``list_consumer_group_offsets`` stop at the NUL; LinkedIn's consumer takes the same high
    watermark, and shows the user metadata with a trailing ``"\\u0000"``)."""
    JAVA = "java"
    """Exactly what LinkedIn's Java consumer commits: LinkedIn shows the user metadata as given, but
    confluent-kafka's own readers read past the end (garbage or ``UnicodeDecodeError``)."""


def commit_metadata(text: str, encoding: CommitEncoding = CommitEncoding.NUL_TERMINATED) -> bytes:
    """The bytes a commit of ``text`` sends."""
    raw = encode_metadata(text)
    return raw + b"\x00" if encoding is CommitEncoding.NUL_TERMINATED else raw


def _user_text(raw: bytes) -> str:
    return raw.split(b"\x00", 1)[0].decode("utf-8", "replace")


def read_metadata(raw: bytes | None) -> StoredMetadata:
    """What stored metadata says; total over every byte string (never raises).

    The comma is looked for in the bytes: 0x2C is never part of a multi-byte UTF-8 sequence, so
    this is the split a Java client makes after decoding.
    """
    if raw is None:
        return NO_METADATA
    head, comma, tail = raw.partition(b",")
    high_watermark = _parse_java_long(head.decode("utf-8", "replace")) if comma else None
    if high_watermark is None:
        return StoredMetadata(None, _user_text(raw), len(raw))
    return StoredMetadata(high_watermark, _user_text(tail), len(raw))
