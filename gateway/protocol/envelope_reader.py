"""Whether a record holds a reference envelope: one answer for every reader.

The consumer's pipeline, its fetch-ahead scan, the Spark envelope scan and ``gateway gc`` all ask
:func:`read_envelope`, so they cannot disagree about a record. The rules, in order:

1. :func:`~gateway.protocol.classify.classify` says what the record is. A segment or a plain value
   is not an envelope. A value that starts with the magic but does not decode and carries no
   envelope header is a look-alike: a legacy value to every reader that delivers or lists, and
   still a possible pointer to gc, which keeps any payload such bytes mention.
2. A record marked with the envelope header that does not decode is a broken envelope: an error,
   never the payload (handing the pointer's bytes to the application would be silent corruption).
3. An unreadable ``_lm`` header makes no segment. Beside the envelope header the record is read by
   its envelope alone (what the producer marked it as), so gc keeps the payload it points at and
   the Spark scan lists it; without the header it is not an envelope. The consumer still reports
   such a record as an invalid segment before it gets here (LinkedIn's rule).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from gateway.errors import EnvelopeFormatError, InvalidSegmentError
from gateway.protocol.classify import Classified, RecordKind, classify
from gateway.protocol.envelope import ENVELOPE_HEADER, Envelope, decode_envelope
from gateway.protocol.headers import Header, has_header


class EnvelopeKind(Enum):
    NONE = "none"
    """Not an envelope: plain or a segment."""
    ENVELOPE = "envelope"
    BROKEN = "broken"
    """Marked as an envelope, but it does not decode: ``error`` says why."""
    LOOKALIKE = "lookalike"
    """Starts with the magic, does not decode, not marked: plain to readers; ``error`` says why."""


@dataclass(frozen=True, slots=True)
class EnvelopeRead:
    kind: EnvelopeKind
    envelope: Envelope | None = None
    error: EnvelopeFormatError | None = None


NOT_AN_ENVELOPE = EnvelopeRead(EnvelopeKind.NONE)


def read_envelope(
    value: bytes | None, headers: Sequence[Header] | None, classified: Classified | None = None
) -> EnvelopeRead:
    """The envelope in a record, a broken one, or none; ``classified`` is :func:`classify`'s answer if known."""
    if classified is None:
        try:
            classified = classify(value, headers)
        except InvalidSegmentError:  # an unreadable _lm header: an envelope only if marked as one
            if not has_header(headers, ENVELOPE_HEADER):
                return NOT_AN_ENVELOPE
            return _decode(value, marked=True)
    if classified.kind is not RecordKind.ENVELOPE:
        return NOT_AN_ENVELOPE
    return _decode(value, classified.marked)


def _decode(value: bytes | None, marked: bool) -> EnvelopeRead:
    try:
        return EnvelopeRead(EnvelopeKind.ENVELOPE, decode_envelope(value))
    except EnvelopeFormatError as exc:
        return EnvelopeRead(EnvelopeKind.BROKEN if marked else EnvelopeKind.LOOKALIKE, error=exc)
