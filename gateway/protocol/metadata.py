"""Commit metadata: ``"<consumer high watermark>,<user metadata>"``.

LinkedIn's consumer commits the *safe* offset and hides the user-visible offset (its "high
watermark") in front of the user's metadata. Speaking the same form lets a Java LiKafkaConsumer
and a HybridConsumer take over each other's group without re-delivering or skipping.
"""

from __future__ import annotations

import re

from gateway.protocol.primitives import INT64_MAX, INT64_MIN

# Long.parseLong: optional sign, then digits (Java accepts any Unicode digit, as Python's \d does).
_JAVA_LONG = re.compile(r"[+-]?\d+")


def wrap_metadata(high_watermark: int, user_metadata: str | None) -> str:
    """``LiKafkaClientsUtils.wrapMetadataWithOffset``; ``None`` becomes the literal ``"null"`` as in Java."""
    return f"{high_watermark},{'null' if user_metadata is None else user_metadata}"


def _parse_java_long(text: str) -> int | None:
    if not _JAVA_LONG.fullmatch(text):
        return None
    value = int(text)
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
