"""What :class:`~gateway.core.pipeline.ConsumerPipeline` answers: typed events, and how the completing record makes one.

A driver acts on the events and never looks inside the pipeline. Every event that stands for a
message carries the safe offset a restart must resume from, so ``_so`` headers and commits need
nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.core.assembler import Assembled, DroppedMessage
from gateway.core.flow import Wait
from gateway.errors import (
    EnvelopeFormatError,
    GatewayError,
    InvalidSegmentError,
    LargeMessageDroppedError,
    PeerFormatError,
)
from gateway.protocol.classify import Classified, RecordKind
from gateway.protocol.envelope import ENVELOPE_HEADER, Envelope
from gateway.protocol.envelope_reader import EnvelopeKind, read_envelope
from gateway.protocol.headers import LM_HEADER, Headers, delivered_lm_value, encode_delivered_lm, without
from gateway.protocol.peers import PeerReader, PeerRecord
from gateway.protocol.records import Record, RouteKind, TopicPartitionKey


@dataclass(slots=True)
class WholeMessage:
    """A whole message, ready for the application once a reference is resolved.

    Events are not frozen only because a frozen dataclass costs a microsecond more per record on
    the plain path; nothing changes them after the pipeline made them.

    ``record`` is the completing record: key, offset and timestamp come from it (LinkedIn's rule).
    ``headers`` are the headers to hand out; they *are* ``record.headers`` (same object) when
    nothing was rewritten, so a driver can skip the copy. ``safe_offset`` is where a restart must
    resume so that nothing delivered after this message is lost: LinkedIn's consumer shows it in a
    ``_so`` header when it differs from ``offset + 1``; that header is the driver's business.
    ``error`` describes what went wrong (``exception`` is the typed error behind it).
    """

    record: Record
    value: bytes | None
    headers: Headers | None
    route: RouteKind
    starting_offset: int
    safe_offset: int
    number_of_segments: int = 1
    envelope: Envelope | None = None
    error: str | None = None
    exception: GatewayError | None = field(default=None, compare=False)


@dataclass(slots=True)
class PlainMessage(WholeMessage):
    """A record that is its own message (including a legacy value that only looks like an envelope)."""


@dataclass(slots=True)
class ChunkCompleted(WholeMessage):
    """The last missing segment arrived: ``value`` is the joined message, ``_lm`` already rewritten."""


@dataclass(slots=True)
class ReferenceToResolve(WholeMessage):
    """An envelope: ``envelope`` names the payload to fetch, or ``error`` says why it cannot be read.

    ``value`` is ``None`` and ``headers`` no longer hold the envelope header. A record another
    library wrote (``large.message.peer.formats``) comes as ``peer`` instead of ``envelope``: its
    key and value as they resolve, and headers without that library's own.
    """

    peer: PeerRecord | None = None


@dataclass(slots=True)
class InvalidRecord:
    """A record LinkedIn would reject as a segment; it is consumed, tracked as no message, and reported."""

    record: Record
    exception: InvalidSegmentError
    safe_offset: int | None


@dataclass(slots=True)
class MessageDropped:
    """An incomplete message given up (buffer full, or expired) while ``record`` was processed.

    ``exception`` is set on the first one when the pipeline was configured to raise on drops
    (``exception.on.message.dropped``); the segment in ``record`` is buffered either way.
    ``record`` is None when no record was processed: partitions waited for room while nothing
    could be fetched (:meth:`~gateway.core.pipeline.ConsumerPipeline.idle`).
    """

    record: Record | None
    dropped: DroppedMessage
    exception: LargeMessageDroppedError | None
    safe_offset: int | None


@dataclass(frozen=True, slots=True)
class CommitNeeded:
    """The pipeline needs ``tp``'s commit before it can judge the record (h11's ``NEED_DATA``).

    Nothing was done with the record: the driver reads what Kafka stores for ``tp``, hands it in
    with :meth:`~gateway.core.commits.CommitTranslator.load_commit`, and feeds the record again.
    Only a pipeline made with ``awaits_commits=True`` (a group consumer) asks; one that never
    commits (a Spark range) starts from nothing committed.
    """

    tp: TopicPartitionKey


@dataclass(frozen=True, slots=True)
class FlowChange:
    """Partitions to stop fetching (``waits``) and to fetch again (``resumes``), each from the offset given.

    The driver pauses a waiting partition, forgets what it fetched of it and reads it again from
    ``resume_at`` once resumed (:mod:`gateway.core.flow`).
    """

    waits: tuple[Wait, ...]
    resumes: tuple[Wait, ...]


Event = PlainMessage | ChunkCompleted | ReferenceToResolve | InvalidRecord | MessageDropped | CommitNeeded | FlowChange


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def peer_event(
    reader: PeerReader, record: Record, headers: Headers | None, safe_now: int, counters: dict[str, int]
) -> ReferenceToResolve | None:
    """A plain record in a peer library's format, to resolve like an envelope; ``None`` for an ordinary one."""
    offset = record.offset
    try:
        peer = reader.read(record.key, record.value, headers)
    except PeerFormatError as exc:
        counters["peer.errors"] = counters.get("peer.errors", 0) + 1
        return ReferenceToResolve(
            record, None, headers, RouteKind.REFERENCE, offset, safe_now, error=error_text(exc), exception=exc
        )
    if peer is None:
        return None
    key = f"peer.{peer.format.value}.messages"
    counters[key] = counters.get(key, 0) + 1
    return ReferenceToResolve(record, None, peer.headers, RouteKind.REFERENCE, offset, safe_now, peer=peer)


def whole_message(
    record: Record,
    kind: Classified,
    result: Assembled,
    safe_now: int,
    peers: PeerReader | None,
    counters: dict[str, int],
) -> PlainMessage | ChunkCompleted | ReferenceToResolve | None:
    """What the record completing a message makes: chunked, a reference to resolve, a peer's pointer or plain.

    A delivered chunked message carries LinkedIn's delivered form of its ``_lm`` header.
    """
    headers = delivered_headers(record.headers, kind)
    if result.segmented:
        counters["chunked.messages"] += 1
        return ChunkCompleted(
            record,
            result.value,
            headers,
            RouteKind.CHUNKED,
            result.starting_offset,
            safe_now,
            result.number_of_segments,
        )
    if kind.kind is RecordKind.ENVELOPE:
        reference = _reference(record, kind, headers, safe_now)
        if reference is not None:
            return reference
    if peers is not None and kind.kind is RecordKind.PLAIN:
        peer = peer_event(peers, record, headers, safe_now, counters)
        if peer is not None:
            return peer
    counters["plain.messages"] += 1
    return PlainMessage(record, result.value, headers, RouteKind.PLAIN, result.starting_offset, safe_now)


def delivered_headers(headers: Headers | None, kind: Classified) -> Headers | None:
    """``headers`` to hand out: a record with an ``_lm`` header gets LinkedIn's delivered form of it."""
    if not kind.has_lm:
        return headers
    out = without(headers, LM_HEADER)
    out.append((LM_HEADER, encode_delivered_lm(kind.lm) if kind.lm is not None else delivered_lm_value(kind.lm_raw)))
    return out


def _reference(record: Record, kind: Classified, headers: Headers | None, safe_now: int) -> ReferenceToResolve | None:
    """The envelope in ``record``; None for a legacy value that merely starts like one (not ours: plain).

    A record marked as an envelope by its header that does not decode is still a reference, one
    that carries its error, so the consumer reports it instead of handing out the envelope's bytes
    (:func:`~gateway.protocol.envelope_reader.read_envelope` decides, for every reader).
    """
    read = read_envelope(record.value, record.headers, kind)
    if read.kind is EnvelopeKind.NONE or read.kind is EnvelopeKind.LOOKALIKE:
        return None
    rest = without(headers, ENVELOPE_HEADER)
    if read.envelope is None:
        exc = read.error or EnvelopeFormatError("broken envelope")
        return ReferenceToResolve(
            record, None, rest, RouteKind.REFERENCE, record.offset, safe_now, error=error_text(exc), exception=exc
        )
    return ReferenceToResolve(record, None, rest, RouteKind.REFERENCE, record.offset, safe_now, envelope=read.envelope)
