"""Feeding a :class:`~gateway.core.assembler.MessageAssembler` raw record values, as tests do.

The library classifies a record once (:func:`gateway.protocol.classify.classify`) and hands the
assembler segments only; tests that start from a record's value and ``_lm`` header go through
this one helper, so the library carries no second entry point that only tests use.
"""

from __future__ import annotations

from gateway.core.assembler import Assembled, MessageAssembler
from gateway.errors import InvalidSegmentError
from gateway.protocol.classify import read_segment
from gateway.protocol.headers import LargeMessageHeader, decode_lm
from gateway.protocol.records import TopicPartitionKey


def assemble(
    assembler: MessageAssembler,
    tp: TopicPartitionKey,
    offset: int,
    value: bytes | None,
    lm_header: bytes | None = None,
    *,
    has_lm_header: bool = False,
) -> Assembled:
    """One record in; a whole message or ``INCOMPLETE`` out (``lm_header``: the record's last ``_lm``)."""
    if value is None:
        return Assembled(None, offset, offset, False)
    header: LargeMessageHeader | None = None
    if lm_header is not None or has_lm_header:
        try:
            header = decode_lm(lm_header)
        except Exception as exc:
            raise InvalidSegmentError(f"unreadable _lm header at offset {offset}: {exc}") from exc
    segment = read_segment(value, header)
    if segment is None:
        return Assembled(value, offset, offset, False)
    return assembler.add_segment(tp, offset, segment)
