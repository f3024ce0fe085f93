"""One answer to "is this record an envelope?" for every reader: the pipeline, fetch-ahead, the Spark scan and gc."""

from __future__ import annotations

import uuid

import pytest

from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.consumer.resolver import Resolver
from gateway.gc.verdicts import EnvelopeMatcher, Pending
from gateway.protocol.envelope import Envelope, encode_envelope, envelope_header
from gateway.protocol.envelope_reader import EnvelopeKind, read_envelope
from gateway.protocol.headers import LM_HEADER, Header
from gateway.protocol.records import Record
from gateway.spark.reading import _envelope_row
from gateway.testing.memory_store import MemoryStore

PAYLOAD = b"payload" * 10
MID = uuid.uuid4()
LOCATOR = f"gw:t:{MID}#1x70"
ENVELOPE = Envelope.for_payload(PAYLOAD, store="memory", locator=LOCATOR, message_id=MID)
VALUE = encode_envelope(ENVELOPE)
MARK = envelope_header()
BAD_LM = (LM_HEADER, b"\x07garbage")

CASES: list[tuple[str, bytes | None, list[Header] | None, EnvelopeKind]] = [
    ("plain", b"hello", None, EnvelopeKind.NONE),
    ("marked", VALUE, [MARK], EnvelopeKind.ENVELOPE),
    ("magic only", VALUE, None, EnvelopeKind.ENVELOPE),
    ("marked, broken", VALUE[:-1], [MARK], EnvelopeKind.BROKEN),
    ("legacy look-alike", VALUE[:-1], None, EnvelopeKind.LOOKALIKE),
    ("marked tombstone", None, [MARK], EnvelopeKind.BROKEN),
    ("unreadable _lm beside the mark", VALUE, [BAD_LM, MARK], EnvelopeKind.ENVELOPE),
    ("unreadable _lm beside the mark, broken", VALUE[:-1], [MARK, BAD_LM], EnvelopeKind.BROKEN),
    ("unreadable _lm, no mark", VALUE, [BAD_LM], EnvelopeKind.NONE),
]


@pytest.mark.parametrize("value, headers, kind", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_read_envelope_answers_each_case(value: bytes | None, headers: list[Header] | None, kind: EnvelopeKind) -> None:
    read = read_envelope(value, headers)
    assert read.kind is kind
    assert (read.envelope == ENVELOPE) is (kind is EnvelopeKind.ENVELOPE)
    assert (read.error is not None) is (kind in (EnvelopeKind.BROKEN, EnvelopeKind.LOOKALIKE))


@pytest.mark.parametrize("value, headers, kind", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gc_the_spark_scan_and_fetch_ahead_agree(
    value: bytes | None, headers: list[Header] | None, kind: EnvelopeKind
) -> None:
    """gc keeps what the Spark scan lists: an unreadable ``_lm`` beside the envelope header is one answer for both."""
    wanted = Pending("memory", LOCATOR, "t", MID)
    matcher = EnvelopeMatcher([wanted])
    matcher.observe(value, headers, 0, 5)
    row = _envelope_row("t", 0, Record(5, None, value, headers))
    if kind is EnvelopeKind.LOOKALIKE:  # a legacy value to the Spark scan; gc keeps what its bytes mention
        assert row is None and matcher.undecodable == 1 and wanted in matcher.suspects
        return
    gc_saw = matcher.envelopes == 1
    spark_saw = row is not None
    assert gc_saw is spark_saw is (kind is not EnvelopeKind.NONE)
    if kind is EnvelopeKind.ENVELOPE:
        assert wanted in matcher.found and row is not None and row[5] == LOCATOR and row[8] is None
    if kind is EnvelopeKind.BROKEN:
        assert matcher.undecodable == 1 and row is not None and row[5] is None and "EnvelopeFormatError" in row[8]
    store = MemoryStore()
    fetcher = ReferenceFetcher(Resolver({"memory": store}))
    fetcher.scan([(("t", 0, 5), "t", value, headers)])
    judged = fetcher._pending.get(("t", 0, 5))  # scanned and judged: fetched ahead unless refused
    assert (judged is not None and judged.envelope == ENVELOPE) is (kind is EnvelopeKind.ENVELOPE)
    fetcher.clear()
