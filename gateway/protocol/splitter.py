"""``MessageSplitterImpl``: one logical message into LinkedIn segment records.

Chunks are ``memoryview`` slices of the caller's value; only the P2 format copies, once, to put
the 33-byte header in front of each chunk. :func:`iter_split` makes each record only when asked,
so a producer that queues each one before taking the next holds one segment, not a copy of the
whole message.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence

from gateway.protocol.headers import LM_HEADER, Header, LargeMessageHeader, LmType, encode_lm, without
from gateway.protocol.primitives import uuid_to_key
from gateway.protocol.records import Bytes, OutRecord
from gateway.protocol.segments import encode_segment


def segment_count(length: int, max_segment_size: int) -> int:
    return -(-length // max_segment_size)


def split(
    topic: str,
    partition: int | None,
    timestamp: int | None,
    message_id: uuid.UUID,
    key: Bytes | None,
    value: Bytes | None,
    max_segment_size: int,
    headers: Sequence[Header] | None = None,
    *,
    header_only: bool = False,
    lm_type: int | None = None,
) -> list[OutRecord]:
    """Every record of :func:`iter_split` at once."""
    return list(
        iter_split(
            topic,
            partition,
            timestamp,
            message_id,
            key,
            value,
            max_segment_size,
            headers,
            header_only=header_only,
            lm_type=lm_type,
        )
    )


def split_count(value: Bytes | None, max_segment_size: int) -> int:
    """How many records :func:`iter_split` yields for ``value``."""
    return 1 if value is None or len(value) == 0 else segment_count(len(value), max_segment_size)


def iter_split(
    topic: str,
    partition: int | None,
    timestamp: int | None,
    message_id: uuid.UUID,
    key: Bytes | None,
    value: Bytes | None,
    max_segment_size: int,
    headers: Sequence[Header] | None = None,
    *,
    header_only: bool = False,
    lm_type: int | None = None,
) -> Iterator[OutRecord]:
    """Split ``value`` into ``ceil(len / max_segment_size)`` records, exactly as LinkedIn does.

    * null or empty value: one record with the value as is and **no headers** (Java's 5-argument
      ``ProducerRecord`` drops them, ``_t`` included);
    * keyless multi-segment messages get the 16-byte id as key so every segment hashes to one partition;
    * each record gets a copy of ``headers`` without any ``_lm``, with a fresh ``_lm`` appended last;
    * ``header_only`` (``li.record.header.enable``) writes H3: raw chunks, ``_lm`` type 2.
    """
    if topic is None:
        raise ValueError("topic cannot be None")
    if max_segment_size <= 0:
        raise ValueError(f"max segment size must be positive, got {max_segment_size}")
    if value is None or len(value) == 0:
        yield OutRecord(topic, partition, timestamp, key, value, [])
        return
    size = len(value)
    count = segment_count(size, max_segment_size)
    if key is None and count > 1:
        key = uuid_to_key(message_id)
    kind = lm_type if lm_type is not None else (LmType.V3 if header_only else LmType.LEGACY_V2)
    base = without(headers, LM_HEADER)
    view = value if isinstance(value, memoryview) else memoryview(value)
    for seq in range(count):
        chunk = view[seq * max_segment_size : min(size, (seq + 1) * max_segment_size)]
        body: Bytes = chunk if header_only else encode_segment(message_id, seq, count, size, chunk)
        lm = encode_lm(LargeMessageHeader(kind, message_id, seq, count, size))
        yield OutRecord(topic, partition, timestamp, key, body, [*base, (LM_HEADER, lm)])
        del body  # else the next segment is built while this one is still held: two at the peak, not one
