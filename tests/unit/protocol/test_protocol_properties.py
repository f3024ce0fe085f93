"""Property-based tests of the sans-IO codecs."""

from __future__ import annotations

import pickle
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.assembler import INCOMPLETE, MessageAssembler
from gateway.errors import HeaderFormatError, InvalidSegmentError
from gateway.protocol import (
    LM_HEADER,
    LargeMessageHeader,
    decode_lm,
    decode_segment,
    delivered_lm,
    encode_lm,
    encode_segment,
    offset_from_metadata,
    split,
    user_metadata_from,
    wrap_metadata,
)
from gateway.protocol.headers import delivered_lm_value, encode_delivered_lm, last_header, lm_type
from gateway.protocol.primitives import (
    INT64_MAX,
    INT64_MIN,
    decode_int,
    decode_long,
    encode_int,
    encode_long,
    java_int,
    random_uuid4,
    uuid_from_halves,
    uuid_halves,
)
from gateway.protocol.segments import SEGMENT_HEADER_SIZE
from tests.assembling import assemble

uuids = st.uuids()
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


def reference_is_segment(value: bytes) -> bool:
    """LinkedIn's DefaultSegmentDeserializer checks, written out independently of the codec."""
    if len(value) < 33:
        return False
    version = int.from_bytes(value[0:1], "big", signed=True)
    if version > 0:
        return False
    check = int.from_bytes(value[1:5], "big", signed=True)
    msb = int.from_bytes(value[5:13], "big", signed=True)
    lsb = int.from_bytes(value[13:21], "big", signed=True)
    if check != java_int(msb + lsb):
        return False
    seq = int.from_bytes(value[21:25], "big", signed=True)
    nseg = int.from_bytes(value[25:29], "big", signed=True)
    size = int.from_bytes(value[29:33], "big", signed=True)
    if seq < 0 or nseg <= 0 or seq >= nseg:
        return False
    return size >= len(value) - 33


@st.composite
def near_segments(draw: st.DrawFn) -> bytes:
    """Bytes that pass the magic check, so the later checks are exercised, not just the first."""
    mid = draw(uuids)
    header = encode_segment(mid, draw(int32), draw(int32), draw(int32), b"")
    version = draw(st.sampled_from([b"\x00", b"\x01", b"\x7f", b"\x80", b"\xff"]))
    return version + header[1:] + draw(st.binary(max_size=64))


@given(st.one_of(st.binary(max_size=200), near_segments()))
@settings(max_examples=500)
def test_segment_decoder_never_raises_and_agrees_with_linkedin(value: bytes) -> None:
    seg = decode_segment(value)
    assert (seg is not None) == reference_is_segment(value)
    if seg is not None:
        assert bytes(seg.payload) == value[SEGMENT_HEADER_SIZE:]


@given(uuids, st.integers(0, 50), st.integers(1, 51), st.binary(max_size=300))
def test_segment_round_trip(mid: uuid.UUID, seq: int, extra: int, payload: bytes) -> None:
    count = seq + extra
    out = encode_segment(mid, seq, count, len(payload) + 7, payload)
    seg = decode_segment(out)
    assert seg is not None
    assert (seg.message_id, seg.sequence_number, seg.number_of_segments, seg.message_size) == (
        mid,
        seq,
        count,
        len(payload) + 7,
    )
    assert bytes(seg.payload) == payload


@given(st.integers(-128, 127), uuids, int32, int32, int32)
def test_lm_header_round_trip(kind: int, mid: uuid.UUID, seg: int, nseg: int, size: int) -> None:
    encoded = encode_lm(LargeMessageHeader(kind, mid, seg, nseg, size))
    assert len(encoded) == (25 if kind == 0 else 29)
    decoded = decode_lm(encoded)
    expected_size = size if kind >= 1 else (-1 if kind == 0 else 0)
    assert decoded == LargeMessageHeader(kind, mid, seg, nseg, expected_size)


@given(st.integers(-128, 127), uuids, int32, int32, int32)
def test_delivered_lm_packed_at_once_is_the_delivered_header_encoded(
    kind: int, mid: uuid.UUID, seg: int, nseg: int, size: int
) -> None:
    header = LargeMessageHeader(kind, mid, seg, nseg, size)
    assert encode_delivered_lm(header) == encode_lm(delivered_lm(header))


@given(st.binary(max_size=40) | st.binary(min_size=25, max_size=25) | st.binary(min_size=29, max_size=29))
def test_lm_type_and_delivered_value_read_raw_bytes_as_the_decoder_does(value: bytes) -> None:
    try:
        header = decode_lm(value)
    except HeaderFormatError:
        with pytest.raises(HeaderFormatError):
            lm_type(value)
        with pytest.raises(HeaderFormatError):
            delivered_lm_value(value)
        return
    assert lm_type(value) == header.type
    assert delivered_lm_value(value) == encode_delivered_lm(header)


@given(st.binary(max_size=40))
def test_lm_header_decoder_is_total(value: bytes) -> None:
    if len(value) < 25:
        with pytest.raises(HeaderFormatError):
            decode_lm(value)
    else:
        header = decode_lm(value)
        assert header.message_size == (int.from_bytes(value[25:29], "big", signed=True) if len(value) == 29 else -1)


@given(int64)
def test_long_round_trip(value: int) -> None:
    assert decode_long(encode_long(value)) == value


@given(int32)
def test_int_round_trip(value: int) -> None:
    assert decode_int(encode_int(value)) == value


@given(int64, st.one_of(st.none(), st.text()))
def test_commit_metadata_round_trip(hw: int, meta: str | None) -> None:
    text = wrap_metadata(hw, meta)
    assert offset_from_metadata(text) == hw
    assert user_metadata_from(text) == ("null" if meta is None else meta)


@given(st.text())
def test_commit_metadata_parser_is_total(text: str) -> None:
    offset_from_metadata(text)
    user_metadata_from(text)


@given(
    payload=st.binary(min_size=1, max_size=5000),
    segment_size=st.integers(1, 1200),
    header_only=st.booleans(),
    key=st.one_of(st.none(), st.binary(max_size=20)),
    order_seed=st.randoms(use_true_random=False),
)
@settings(max_examples=300)
def test_split_then_assemble_is_identity(
    payload: bytes, segment_size: int, header_only: bool, key: bytes | None, order_seed: object
) -> None:
    mid = uuid.uuid4()
    records = split("t", None, 1, mid, key, payload, segment_size, [("a", b"1")], header_only=header_only)
    assert len(records) == -(-len(payload) // segment_size)
    assert all(r.key == records[0].key for r in records)
    if key is None and len(records) > 1:
        assert records[0].key == mid.bytes
    assembler = MessageAssembler(capacity=10_000_000)
    results = []
    for offset, record in enumerate(records):
        value = bytes(record.value or b"")
        result = assemble(assembler, ("t", 0), offset, value, last_header(record.headers, LM_HEADER))
        results.append(result)
    assert all(r is INCOMPLETE for r in results[:-1])
    assert results[-1].value == payload
    assert results[-1].starting_offset == 0
    assert assembler.buffered_bytes == 0


@given(payload=st.binary(min_size=2, max_size=3000), segment_size=st.integers(1, 500), data=st.data())
def test_assembly_is_order_and_duplicate_insensitive(payload: bytes, segment_size: int, data: st.DataObject) -> None:
    records = split("t", None, 1, uuid.uuid4(), b"k", payload, segment_size)
    if len(records) < 2:
        return
    order = data.draw(st.permutations(list(range(len(records)))))
    dup = data.draw(st.sampled_from(order[:-1])) if len(order) > 1 else None
    sequence = list(order[:-1]) + ([dup] if dup is not None else []) + [order[-1]]
    assembler = MessageAssembler(capacity=10_000_000)
    result = None
    for offset, index in enumerate(sequence):
        result = assemble(assembler, ("t", 0), offset, bytes(records[index].value or b""))
    assert result is not None and result.value == payload


def test_uuid_halves_are_java_signed() -> None:
    mid = uuid.UUID("9f0e1d2c-3b4a-4596-8877-665544332211")
    assert uuid_halves(mid) == (-6985613896194570858, -8613303245920329199)


def test_header_only_segment_with_bad_header_raises() -> None:
    bad = encode_lm(LargeMessageHeader(2, uuid.uuid4(), 3, 2, 100))  # seq >= count
    with pytest.raises(InvalidSegmentError):
        assemble(MessageAssembler(), ("t", 0), 0, b"x" * 10, bad)


@given(st.integers(INT64_MIN, INT64_MAX), st.integers(INT64_MIN, INT64_MAX))
def test_uuid_from_halves_is_the_uuid_the_constructor_builds(msb: int, lsb: int) -> None:
    built = uuid_from_halves(msb, lsb)
    expected = uuid.UUID(bytes=encode_long(msb) + encode_long(lsb))
    assert built == expected and hash(built) == hash(expected)
    assert str(built) == str(expected) and built.bytes == expected.bytes and built.is_safe is expected.is_safe
    assert uuid_halves(built) == (msb, lsb)
    assert pickle.loads(pickle.dumps(built)) == expected


@given(st.binary(min_size=16, max_size=16))
def test_random_uuid4_is_what_uuid4_makes_of_the_same_random_bytes(raw: bytes) -> None:
    built = random_uuid4(lambda n: raw[:n])
    expected = uuid.UUID(bytes=raw, version=4)  # what ``uuid.uuid4()`` does with ``os.urandom(16)``
    assert built == expected and hash(built) == hash(expected) and built.bytes == expected.bytes
    assert built.version == 4 and built.variant == uuid.RFC_4122 and built.is_safe is expected.is_safe
    assert pickle.loads(pickle.dumps(built)) == expected


@given(uuids)
def test_uuid_halves_are_javas_signed_longs(message_id: uuid.UUID) -> None:
    raw = message_id.bytes
    assert uuid_halves(message_id) == (
        int.from_bytes(raw[:8], "big", signed=True),
        int.from_bytes(raw[8:], "big", signed=True),
    )
