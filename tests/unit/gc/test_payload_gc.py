"""gc's decisions about transactional envelopes (issue 28, point 4), without a broker.

A partition is written as a list of records, each committed, aborted or in a transaction still
open; the two reads gc makes are played over it as Kafka serves them: ``read_uncommitted`` returns
every record up to the high watermark, ``read_committed`` only the committed ones below the last
stable offset.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Literal

from gateway.gc.sweeper import sweep
from gateway.gc.verdicts import (
    CommittedRead,
    EnvelopeMatcher,
    Pending,
    ScanProgress,
    TopicScan,
    Verdict,
    Verification,
    committed_ranges,
    judge,
)
from gateway.protocol.envelope import Envelope, encode_envelope, envelope_header
from gateway.testing.memory_store import MemoryStore

State = Literal["committed", "aborted", "open"]
Record = tuple[bytes, State]


def pending(topic: str = "t") -> Pending:
    mid = uuid.uuid4()
    return Pending("redis", f"gw:{topic}:{mid}#1x10", topic, mid)


def envelope(p: Pending) -> bytes:
    return encode_envelope(Envelope("redis", p.locator, 10, b"\0" * 32, p.message_id))


def scan(
    wanted: Sequence[Pending], log: Sequence[Record], *, low: int = 0, committed_low: int | None = None
) -> TopicScan:
    """Both reads of a one-partition topic holding ``log`` from offset ``low``, as Kafka serves them."""
    high = low + len(log)
    stable = next((low + i for i, (_, state) in enumerate(log) if state == "open"), high)
    matcher = EnvelopeMatcher(wanted)
    progress = ScanProgress({0: high})
    for offset, (value, _) in enumerate(log, start=low):
        matcher.observe(value, [envelope_header()], 0, offset)
        progress.advance(0, offset + 1)
    uncommitted = TopicScan.finished("t", matcher, progress)
    first = low if committed_low is None else committed_low  # retention may move it between the reads
    sightings = [s for where in uncommitted.sightings.values() for s in where]
    ranges = committed_ranges(sightings, {0: first}, {0: stable})
    committed = EnvelopeMatcher(uncommitted.sightings)
    reached = ScanProgress({p: end for p, (_, end) in ranges.items()})
    for p, (start, end) in ranges.items():
        reached.advance(p, start)
        for offset in range(start, end):
            value, state = log[offset - low]
            if state == "committed":
                committed.observe(value, [envelope_header()], p, offset)
        reached.advance(p, end)
    return uncommitted.settled_by(CommittedRead.finished("t", committed, reached, ranges, {0: stable}))


def test_committed_ranges_go_from_the_first_sighting_past_the_last_never_beyond_the_last_stable_offset() -> None:
    sightings = [(0, 5), (0, 2), (0, 9), (1, 4), (2, 3)]
    ranges = committed_ranges(sightings, {0: 3, 1: 0, 2: 0}, {0: 7, 1: 10, 2: 1})
    assert ranges == {0: (3, 7), 1: (4, 5), 2: (3, 3)}, "from the log start if retention passed the first one"


def test_only_a_committed_envelope_lands_a_payload_an_aborted_one_proves_it_dead() -> None:
    aborted, committed, open_, twice, gone = (pending() for _ in range(5))
    log: list[Record] = [
        (envelope(aborted), "aborted"),
        (envelope(twice), "aborted"),
        (b"abort marker", "aborted"),
        (envelope(committed), "committed"),
        (envelope(twice), "committed"),  # sent again and committed: live
        (envelope(open_), "open"),
        (envelope(committed), "committed"),  # past the last stable offset: not needed to land it
    ]
    result = scan([aborted, committed, open_, twice, gone], log)
    assert result.committed is not None and result.committed.read == {0: (0, 5)}
    assert judge(committed, result).verdict is Verdict.LANDED
    assert judge(twice, result).verdict is Verdict.LANDED
    verdict = judge(aborted, result)
    assert verdict.verdict is Verdict.ABSENT
    assert verdict.reason == "only aborted envelopes point at it (t[0] offset 0): read_committed went past them"
    verdict = judge(open_, result)
    assert verdict.verdict is Verdict.UNKNOWN
    assert "t[0] offset 5 lies at or past the last stable offset 5: a transaction there is still open" in verdict.reason
    assert judge(gone, result).verdict is Verdict.ABSENT


def test_an_open_transaction_keeps_every_envelope_behind_it_even_committed_ones() -> None:
    """Past the last stable offset nothing is decided, whoever wrote the envelope."""
    before, inside, after = pending(), pending(), pending()
    log: list[Record] = [(envelope(before), "committed"), (envelope(inside), "open"), (envelope(after), "committed")]
    result = scan([before, inside, after], log)
    assert judge(before, result).verdict is Verdict.LANDED
    assert judge(inside, result).verdict is Verdict.UNKNOWN
    assert judge(after, result).verdict is Verdict.UNKNOWN, "not landed, so its mark stays until it can be proved"


def test_a_committed_read_that_did_not_reach_an_envelope_decides_nothing_about_it() -> None:
    aborted, committed = pending(), pending()
    log: list[Record] = [(envelope(committed), "committed"), (b"x", "committed"), (envelope(aborted), "aborted")]
    full = scan([aborted, committed], log)
    assert full.committed is not None and judge(aborted, full).verdict is Verdict.ABSENT
    matcher = EnvelopeMatcher([aborted, committed])
    matcher.observe(envelope(committed), None, 0, 0)
    short = ScanProgress({0: 3})
    short.advance(0, 1)
    cut = CommittedRead.finished("t", matcher, short, {0: (0, 3)}, {0: 3}, "the scan deadline passed")
    assert cut.problem == "read_committed scan of t[0] stopped at offset 1 of 3 (the scan deadline passed)"
    partial = full.settled_by(cut)
    assert judge(committed, partial).verdict is Verdict.LANDED, "what it returned is proof"
    verdict = judge(aborted, partial)
    assert verdict.verdict is Verdict.UNKNOWN and "stopped at offset 1 of 3" in verdict.reason
    failed = full.settled_by(CommittedRead.failed("read_committed offsets of t[0] could not be read: timed out"))
    assert judge(aborted, failed).verdict is Verdict.UNKNOWN and "timed out" in judge(aborted, failed).reason
    assert judge(aborted, replace(full, committed=None)).verdict is Verdict.UNKNOWN, "never read committed"


def test_an_envelope_removed_between_the_two_reads_is_not_taken_for_aborted() -> None:
    p = pending()
    result = scan([p], [(envelope(p), "committed"), (b"x", "committed")], committed_low=1)
    verdict = judge(p, result)
    assert verdict.verdict is Verdict.UNKNOWN and "removed (retention)" in verdict.reason


def test_an_undecodable_envelope_is_doubt_only_when_it_was_committed() -> None:
    in_aborted, in_committed = pending(), pending()
    newer = b"\x1bGWREF\x09"  # a version this reader cannot decode, naming the write
    log: list[Record] = [
        (newer + str(in_aborted.message_id).encode(), "aborted"),
        (newer + str(in_committed.message_id).encode(), "committed"),
    ]
    result = scan([in_aborted, in_committed], log)
    assert result.suspects == {in_aborted, in_committed}
    assert judge(in_aborted, result).verdict is Verdict.ABSENT
    verdict = judge(in_committed, result)
    assert verdict.verdict is Verdict.UNKNOWN and "undecodable envelope" in verdict.reason


class ParsingStore(MemoryStore):
    def validate_locator(self, locator: str) -> object:
        topic, _, mid = locator.partition("/")
        return SimpleNamespace(topic=topic, message_id=uuid.UUID(mid))


def test_sweep_deletes_the_proved_dead_with_the_proof_and_keeps_the_undecided_with_their_marks() -> None:
    store = ParsingStore("redis")
    locators = [store.put("t", uuid.uuid4(), b"payload", pending_since_ms=1) for _ in range(3)]
    verdicts = dict(
        zip(
            locators,
            (
                Verification(Verdict.ABSENT, "only aborted envelopes point at it (t[0] offset 0): ..."),
                Verification(Verdict.UNKNOWN, "kept: ... still open"),
                Verification(Verdict.LANDED, "a committed envelope in t points at it"),
            ),
            strict=True,
        )
    )
    report = sweep(
        {"redis": store},
        grace_ms=0,
        now_ms=10,
        verifier=lambda batch: {p: verdicts[p.locator] for p in batch},
        dry_run=False,
    )
    dead, undecided, landed = locators
    assert report.deleted == [dead] and report.proofs == {dead: verdicts[dead].reason}
    assert report.kept == [(undecided, "kept: ... still open")] and report.landed == [landed]
    assert sorted(store.payloads) == sorted([undecided, landed]) and list(store.pending) == [undecided]


def test_a_read_done_elsewhere_gets_the_verdicts_of_gcs_own_read() -> None:
    """``gateway reconcile`` hands the sightings of its Spark scan to gc's proof (issue 39): who read
    the topic ``read_uncommitted`` must not change what committed, aborted and open mean."""
    aborted, committed, open_, after = (pending() for _ in range(4))
    log: list[Record] = [
        (envelope(aborted), "aborted"),
        (envelope(committed), "committed"),
        (envelope(open_), "open"),
        (envelope(after), "committed"),
    ]
    own = scan([aborted, committed, open_, after], log)
    assert own.committed is not None
    elsewhere = TopicScan.read_elsewhere("t", own.sightings, own.ends).settled_by(own.committed)
    verdicts = {p: judge(p, elsewhere) for p in (aborted, committed, open_, after)}
    assert verdicts == {p: judge(p, own) for p in verdicts}
    assert [v.verdict for v in verdicts.values()] == [Verdict.ABSENT, Verdict.LANDED, Verdict.UNKNOWN, Verdict.UNKNOWN]
