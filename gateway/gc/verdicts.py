"""The decisions of ``gateway gc``, pure: what a read of a topic proves about each pending write.

A payload is deleted only when a *complete* read of its topic proved that no envelope points at
it, or that every envelope pointing at it was aborted; everything else is kept with its reason.
:mod:`gateway.gc.sweeper` says why, and applies the verdicts to the stores;
:mod:`gateway.gc._envelope_scan` does the reading.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gateway.protocol.envelope_reader import EnvelopeKind, read_envelope
from gateway.protocol.peers.pointer_formats import pointed_locator

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes | None]] | None


class Verdict(enum.Enum):
    LANDED = "landed"
    """A committed (or non-transactional) envelope in the topic points at the payload: it is live."""
    ABSENT = "absent"
    """A complete read of the topic found nothing pointing at it, or only aborted envelopes: it may go."""
    UNKNOWN = "unknown"
    """Neither could be proved; the payload stays."""


@dataclass(frozen=True, slots=True)
class Verification:
    verdict: Verdict
    reason: str


@dataclass(frozen=True, slots=True)
class Pending:
    """A pending store write old enough to be judged, with what its locator says about it."""

    store: str
    locator: str
    topic: str
    message_id: uuid.UUID
    batched: bool = False
    """Journalled in a batch marker, which stays until the batch is all settled: a batched mark
    past the grace period may belong to a payload acknowledged long ago, so it proves nothing alone."""


Sighting = tuple[int, int]
"""``(partition, offset)`` of a record pointing at a pending write (an envelope, or a suspect)."""


@dataclass
class EnvelopeMatcher:
    """Watches a topic's records for envelopes pointing at any of the ``wanted`` writes.

    Memory is bounded by the writes looked for, not by the topic: only matches are kept.
    """

    wanted: Iterable[Pending]
    found: set[Pending] = field(default_factory=set, init=False)
    suspects: set[Pending] = field(default_factory=set, init=False)
    """Writes mentioned by a record that is marked as an envelope but does not decode."""
    sightings: dict[Pending, set[Sighting]] = field(default_factory=dict, init=False)
    """Where each record behind ``found`` and ``suspects`` lies."""
    store_names: set[str] = field(default_factory=set, init=False)
    envelopes: int = field(default=0, init=False)
    undecodable: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._pending = list(self.wanted)
        self._by_id = {p.message_id: p for p in self._pending}
        self._by_locator = {p.locator: p for p in self._pending}

    def observe(self, value: bytes | None, headers: Headers, partition: int, offset: int) -> None:
        """A look-alike (magic, no mark, does not decode) counts as undecodable: gc keeps what it mentions."""
        read = read_envelope(value, headers)
        if read.kind is EnvelopeKind.NONE:
            self._observe_pointer(value, headers, partition, offset)
            return
        self.envelopes += 1
        envelope = read.envelope
        if envelope is None:
            self.undecodable += 1
            raw = bytes(value or b"")
            for p in self._pending:
                if mentions(raw, p):
                    self.suspects.add(p)
                    self.sightings.setdefault(p, set()).add((partition, offset))
            return
        self.store_names.add(envelope.store)
        for hit in (self._by_id.get(envelope.message_id), self._by_locator.get(envelope.locator)):
            if hit is not None:
                self.found.add(hit)
                self.sightings.setdefault(hit, set()).add((partition, offset))

    def _observe_pointer(self, value: bytes | None, headers: Headers, partition: int, offset: int) -> None:
        """A pointer record (``reference.format=bakdata|aws``) names its object by locator: as good as an envelope."""
        locator = pointed_locator(value, headers) if self._by_locator else None
        hit = None if locator is None else self._by_locator.get(locator)
        if hit is not None:
            self.envelopes += 1
            self.found.add(hit)
            self.sightings.setdefault(hit, set()).add((partition, offset))


def mentions(raw: bytes, pending: Pending) -> bool:
    """Whether undecodable envelope bytes could be a pointer at ``pending`` (newer version, damage)."""
    return pending.message_id.bytes in raw or str(pending.message_id).encode() in raw or pending.locator.encode() in raw


@dataclass
class ScanProgress:
    """How far a scan got towards the end offsets captured when it started.

    ``ends`` maps partition to the high watermark seen first; records appended later cannot hold
    an envelope for a write that was already pending, so they need not be read.
    """

    ends: Mapping[int, int]
    positions: dict[int, int] = field(default_factory=dict)

    def advance(self, partition: int, next_offset: int) -> None:
        if next_offset > self.positions.get(partition, -1):
            self.positions[partition] = next_offset

    def lagging(self) -> list[tuple[int, int, int]]:
        """``(partition, reached, end)`` for every partition not yet read up to its end."""
        return [
            (p, self.positions.get(p, 0), end) for p, end in sorted(self.ends.items()) if self.positions.get(p, 0) < end
        ]

    @property
    def complete(self) -> bool:
        return not self.lagging()


def lag_problem(topic: str, progress: ScanProgress, why: str = "") -> str | None:
    """What a read short of its end offsets failed to reach, or ``None`` when it reached them all."""
    lagging = progress.lagging()
    if not lagging:
        return None
    problem = "scan of " + ", ".join(
        f"{topic}[{p}] stopped at offset {reached} of {end}" for p, reached, end in lagging
    )
    return problem + (f" ({why})" if why else "")


def committed_ranges(
    sightings: Iterable[Sighting], lows: Mapping[int, int], stable: Mapping[int, int]
) -> dict[int, tuple[int, int]]:
    """Per partition, the offsets ``[start, end)`` a ``read_committed`` read goes through to decide ``sightings``.

    From the first sighting (or the log start, where retention has moved past it) to just past the
    last, never beyond the last stable offset: a ``read_committed`` fetch there waits for the open
    transaction instead of answering, and nothing there can be decided yet anyway.
    """
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for partition, offset in sightings:
        first[partition] = min(offset, first.get(partition, offset))
        last[partition] = max(offset, last.get(partition, offset))
    out: dict[int, tuple[int, int]] = {}
    for partition in sorted(first):
        start = max(first[partition], lows.get(partition, 0))
        out[partition] = (start, max(start, min(last[partition] + 1, stable.get(partition, 0))))
    return out


@dataclass(frozen=True)
class CommittedRead:
    """What a ``read_committed`` read over the offsets of a topic's sightings established.

    Kafka hands a ``read_committed`` reader the committed (and non-transactional) records below a
    partition's last stable offset and steps over the aborted ones. An envelope seen
    ``read_uncommitted`` at an offset this read went through without returning it was aborted. At
    or past the last stable offset nothing is proved: the transaction there may still commit.
    """

    problem: str | None
    found: frozenset[Pending] = frozenset()
    """Writes a committed envelope points at."""
    suspects: frozenset[Pending] = frozenset()
    read: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    """Per partition, the offsets ``[start, reached)`` the read went through."""
    stable: Mapping[int, int] = field(default_factory=dict)
    """Per partition, the last stable offset when the read started."""

    @classmethod
    def failed(cls, problem: str) -> CommittedRead:
        return cls(problem)

    @classmethod
    def finished(
        cls,
        topic: str,
        matcher: EnvelopeMatcher,
        progress: ScanProgress,
        ranges: Mapping[int, tuple[int, int]],
        stable: Mapping[int, int],
        why: str = "",
    ) -> CommittedRead:
        read = {p: (start, max(start, progress.positions.get(p, start))) for p, (start, _) in ranges.items()}
        problem = lag_problem(topic, progress, why)
        problem = None if problem is None else f"read_committed {problem}"
        return cls(problem, frozenset(matcher.found), frozenset(matcher.suspects), read, dict(stable))

    def covers(self, sighting: Sighting) -> bool:
        partition, offset = sighting
        start, reached = self.read.get(partition, (0, 0))
        return start <= offset < reached

    def undecided(self, topic: str, sighting: Sighting) -> str:
        """Why the read did not decide the record at ``sighting``, one it does not cover."""
        partition, offset = sighting
        where = f"the envelope at {topic}[{partition}] offset {offset}"
        stable = self.stable.get(partition)
        if stable is not None and offset >= stable:
            return f"{where} lies at or past the last stable offset {stable}: a transaction there is still open"
        if self.problem:
            return f"{where} was not decided: {self.problem}"
        return f"{where} was removed (retention) before the read_committed read reached it"


@dataclass(frozen=True)
class TopicScan:
    """What one read of a topic established; ``problem`` is set whenever it was not complete."""

    topic: str
    problem: str | None
    found: frozenset[Pending] = frozenset()
    suspects: frozenset[Pending] = frozenset()
    store_names: frozenset[str] = frozenset()
    ends: Mapping[int, int] = field(default_factory=dict)
    sightings: Mapping[Pending, frozenset[Sighting]] = field(default_factory=dict)
    """Where the ``read_uncommitted`` read saw each record behind ``found`` and ``suspects``."""
    committed: CommittedRead | None = None
    """The ``read_committed`` read over ``sightings``, once it ran (without sightings it is not needed)."""

    @property
    def complete(self) -> bool:
        return self.problem is None

    @classmethod
    def failed(cls, topic: str, problem: str) -> TopicScan:
        return cls(topic, problem)

    @classmethod
    def finished(cls, topic: str, matcher: EnvelopeMatcher, progress: ScanProgress, why: str = "") -> TopicScan:
        """The outcome of a read; any partition short of its end offset makes it incomplete."""
        return cls(
            topic,
            lag_problem(topic, progress, why),
            frozenset(matcher.found),
            frozenset(matcher.suspects),
            frozenset(matcher.store_names),
            dict(progress.ends),
            {p: frozenset(where) for p, where in matcher.sightings.items()},
        )

    @classmethod
    def read_elsewhere(
        cls, topic: str, sightings: Mapping[Pending, Iterable[Sighting]], ends: Mapping[int, int]
    ) -> TopicScan:
        """The outcome of a complete ``read_uncommitted`` read done by someone else (``gateway
        reconcile``'s Spark scan, up to ``ends``), given as where it saw each write's envelopes."""
        where = {p: frozenset(seen) for p, seen in sightings.items()}
        return cls(topic, None, frozenset(where), ends=dict(ends), sightings=where)

    def settled_by(self, committed: CommittedRead) -> TopicScan:
        return replace(self, committed=committed)


def judge(pending: Pending, scan: TopicScan) -> Verification:
    """The one place a payload is declared dead: a complete scan without any trace of it, or with only
    envelopes that a ``read_committed`` read went past without returning (aborted transactions)."""
    committed = scan.committed
    if committed is not None and pending in committed.found:
        return Verification(Verdict.LANDED, f"a committed envelope in {scan.topic} points at it")
    if not scan.complete:
        return Verification(Verdict.UNKNOWN, f"{scan.problem}")
    seen = sorted(scan.sightings.get(pending, ()))
    if not seen:
        ends = ", ".join(f"{p}:{end}" for p, end in sorted(scan.ends.items())) or "empty"
        return Verification(Verdict.ABSENT, f"no envelope in {scan.topic} (read every partition to {ends})")
    if committed is None:
        what = "an undecodable envelope" if pending in scan.suspects else "an envelope"
        return Verification(Verdict.UNKNOWN, f"{what} in {scan.topic} points at it, not read committed")
    if pending in committed.suspects:
        return Verification(Verdict.UNKNOWN, f"an undecodable envelope in {scan.topic} mentions it")
    for sighting in seen:
        if not committed.covers(sighting):
            return Verification(Verdict.UNKNOWN, f"{committed.undecided(scan.topic, sighting)}")
    where = ", ".join(f"{scan.topic}[{p}] offset {o}" for p, o in seen)
    return Verification(Verdict.ABSENT, f"only aborted envelopes point at it ({where}): read_committed went past them")
