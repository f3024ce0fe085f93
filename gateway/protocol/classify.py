"""What a consumed record is: a plain value, a LinkedIn segment, or a reference envelope.

Every reader (the consumer, the Spark source, the envelope scan) asks :func:`classify`, so the
rules live in one place and in one order: a segment first (an ``_lm`` header, or a value that
LinkedIn's deserializer reads as a segment), then an envelope (the envelope header, or the magic
at the start of the value), else plain. The order matters: the chunk of a header-only segment is
arbitrary payload bytes and may start like an envelope.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from gateway.errors import InvalidSegmentError
from gateway.protocol.envelope import ENVELOPE_HEADER, MAGIC, looks_like_envelope
from gateway.protocol.headers import LM_HEADER, Header, LargeMessageHeader, LmType, decode_lm, lm_type
from gateway.protocol.segments import SEGMENT_HEADER_SIZE, Segment, decode_segment
from gateway.protocol.slots import direct_init


class RecordKind(Enum):
    PLAIN = "plain"
    SEGMENT = "segment"
    ENVELOPE = "envelope"


@direct_init
@dataclass(frozen=True, slots=True)
class Classified:
    """The answer, with what was decoded on the way so that nobody decodes it again.

    ``has_lm`` and ``lm_raw`` say whether the record carried an ``_lm`` header and the *last* one's bytes
    (checked readable). ``lm`` is that header decoded where the segment was read from it (header-only,
    type 2 and up), else ``None``: a payload-header segment carries the same facts itself, and the one
    use of its ``_lm`` header, the delivered form, reads the bytes. ``marked`` is True when the
    envelope header is present.
    """

    kind: RecordKind
    segment: Segment | None = None
    lm: LargeMessageHeader | None = None
    has_lm: bool = False
    lm_raw: bytes | None = None
    marked: bool = False


_MAGIC_FIRST = MAGIC[0]

PLAIN_RECORD = Classified(RecordKind.PLAIN)
"""The common answer, shared: a plain record without an ``_lm`` header allocates nothing."""
_MARKED_ENVELOPE = Classified(RecordKind.ENVELOPE, marked=True)
_UNMARKED_ENVELOPE = Classified(RecordKind.ENVELOPE)


def read_segment(value: bytes | bytearray | memoryview, lm: LargeMessageHeader | None) -> Segment | None:
    """The segment a value carries: described by a header-only ``_lm`` header, else in its first 33 bytes.

    Raises :class:`InvalidSegmentError` for a header-only segment that fails LinkedIn's sanity check.
    """
    if lm is not None and lm.header_only:
        segment = Segment(lm.message_id, lm.segment_number, lm.number_of_segments, lm.message_size, memoryview(value))
        segment.sanity_check()
        return segment
    return decode_segment(value)


def classify(value: bytes | None, headers: Sequence[Header] | None, offset: int | None = None) -> Classified:
    """Plain, segment or envelope; raises :class:`InvalidSegmentError` for an unreadable ``_lm`` header.

    Cheap for plain records: one pass over the headers, a look at the first byte (a version byte
    above 0 is "not a segment" to LinkedIn, and the envelope magic starts with 0x1b), and a
    six-byte compare. ``offset`` only names the record in the error message.
    """
    lm_raw: bytes | None = None
    has_lm = marked = False
    if headers:
        for key, header_value in headers:
            if key == LM_HEADER:
                lm_raw, has_lm = header_value, True
            elif key == ENVELOPE_HEADER:
                marked = True
    lm: LargeMessageHeader | None = None
    if has_lm:
        try:  # checked always, decoded only where it describes the segment (header-only, type 2 and up)
            lm = decode_lm(lm_raw) if lm_type(lm_raw) >= LmType.V3 else None
        except Exception as exc:
            where = "" if offset is None else f" at offset {offset}"
            raise InvalidSegmentError(f"unreadable _lm header{where}: {exc}") from exc
    if value is None:
        # A tombstone is never a segment, but its _lm header is rewritten on delivery, so an
        # unreadable one is reported here like any other, not half-way through delivering it.
        if has_lm:
            return Classified(RecordKind.ENVELOPE if marked else RecordKind.PLAIN, None, lm, True, lm_raw, marked)
        return _MARKED_ENVELOPE if marked else PLAIN_RECORD
    first = value[0] if value else -1
    if has_lm or (len(value) >= SEGMENT_HEADER_SIZE and not 0 < first < 0x80):
        segment = read_segment(value, lm)
        if segment is not None:
            return Classified(RecordKind.SEGMENT, segment, lm, has_lm, lm_raw, marked)
    envelope = marked or (first == _MAGIC_FIRST and looks_like_envelope(value))
    kind = RecordKind.ENVELOPE if envelope else RecordKind.PLAIN
    if has_lm:
        return Classified(kind, None, lm, True, lm_raw, marked)
    if kind is RecordKind.PLAIN:
        return PLAIN_RECORD
    return _MARKED_ENVELOPE if marked else _UNMARKED_ENVELOPE


def is_plainly_plain(value: bytes | None, headers: Sequence[Header] | None) -> bool:
    """A sufficient test for :func:`classify` answering plain, cheap enough to run on every record of a batch.

    True only for a record with no headers whose value cannot be a segment (empty, shorter than a
    segment header, or starting with a byte LinkedIn reads as "not a segment") and does not start
    like an envelope. False says nothing: such a record goes through :func:`classify`.
    """
    if headers is not None:
        return False
    if not value:
        return True
    first = value[0]
    return first != _MAGIC_FIRST and (0 < first < 0x80 or len(value) < SEGMENT_HEADER_SIZE)


_PLAIN_FIRST_BYTES = bytes(b for b in range(1, 0x80) if b != _MAGIC_FIRST)
_FIRST_BYTE = slice(0, 1)
_FIRST = operator.itemgetter(0)


def are_plainly_plain(values: Sequence[bytes | None], header_lists: Sequence[object]) -> bool:
    """:func:`is_plainly_plain` for a whole batch at once, with no Python-level step per record.

    True only when no record has headers, no value is null, and every non-empty value starts with
    a byte in 0x01..0x7f other than the envelope's first: a stricter form of the per-record test,
    so True implies it for each record. False says nothing; the records are then tested one by one.
    """
    if header_lists.count(None) != len(header_lists):  # all None: identity compares, no Python per record
        return False
    try:  # a null value raises TypeError here, so no separate pass looks for one
        try:
            firsts = bytes(map(_FIRST, values))  # type: ignore[arg-type]
        except IndexError:  # an empty value (plain): take the slower way that allows it
            firsts = b"".join(map(operator.itemgetter(_FIRST_BYTE), values))  # type: ignore[arg-type]
    except TypeError:
        return False
    return not firsts.translate(None, _PLAIN_FIRST_BYTES)
