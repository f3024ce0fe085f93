"""Every case of LinkedIn's golden vectors, walked in one test that fails on the first mismatch."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from gateway.errors import HeaderFormatError
from gateway.protocol import (
    LargeMessageHeader,
    decode_lm,
    decode_segment,
    encode_lm,
    encode_segment,
    offset_from_metadata,
    split,
    user_metadata_from,
    wrap_metadata,
)
from gateway.protocol.primitives import encode_int, encode_long, uuid_halves, uuid_to_key
from gateway.protocol.segments import checksum
from tests.golden import hx, load_vectors, uid

VECTORS = load_vectors()
SECTIONS = [
    "segment_serializer",
    "segment_deserializer",
    "splitter",
    "lm_header_encode",
    "lm_header_decode",
    "primitive_encodings",
    "offset_metadata",
]


def _check_segment_fields(seg: Any, expected: dict[str, Any]) -> None:
    assert seg.message_id == uid(expected["message_id"])
    assert uuid_halves(seg.message_id) == (expected["message_id"]["msb"], expected["message_id"]["lsb"])
    assert seg.sequence_number == expected["sequence_number"]
    assert seg.number_of_segments == expected["number_of_segments"]
    assert seg.message_size == expected["message_size_in_bytes"]
    assert bytes(seg.payload) == hx(expected["payload_hex"])


def _check_lm(header: LargeMessageHeader, expected: dict[str, Any]) -> None:
    assert header.type == expected["type"]
    assert header.message_id == uid(expected["message_id"])
    assert header.segment_number == expected["segment_number"]
    assert header.number_of_segments == expected["number_of_segments"]
    assert header.message_size == expected["message_size_in_bytes"]


def check_segment_serializer(case: dict[str, Any]) -> None:
    inp = case["input"]
    mid = uid(inp["message_id"])
    assert mid is not None
    payload = hx(inp["payload_hex"]) or b""
    out = encode_segment(mid, inp["sequence_number"], inp["number_of_segments"], inp["message_size_in_bytes"], payload)
    assert out.hex() == case["output_hex"]
    assert len(out) == case["output_length"]
    signed = checksum(mid) - (1 << 32) if checksum(mid) & 0x80000000 else checksum(mid)
    assert signed == case["checksum_int32"]
    seg = decode_segment(out)
    assert seg is not None
    _check_segment_fields(seg, case["deserialized"])


def check_segment_deserializer(case: dict[str, Any]) -> None:
    seg = decode_segment(hx(case["input_hex"]))
    assert (seg is not None) == case["is_segment"]
    if seg is not None:
        _check_segment_fields(seg, case["deserialized"])


def check_splitter(case: dict[str, Any]) -> None:
    inp = case["input"]
    headers = [(h["key"], hx(h["value_hex"])) for h in inp["input_headers"] or []]
    before = list(headers)
    mid = uid(inp["message_id"])
    if "exception" in case:
        # LinkedIn NPEs on a null id; we refuse it up front with a typed error instead.
        with pytest.raises((TypeError, ValueError, AttributeError)):
            split(
                inp["topic"],
                inp["partition"],
                inp["timestamp"],
                mid,
                hx(inp["key_hex"]),  # type: ignore[arg-type]
                hx(inp["value_hex"]),
                inp["max_segment_size"],
                headers,
                header_only=inp["li.record.header.enable"],
            )
        return
    assert mid is not None
    value = hx(inp["value_hex"])
    if value is not None:
        assert hashlib.sha256(value).hexdigest() == inp["value_sha256"]
    records = split(
        inp["topic"],
        inp["partition"],
        inp["timestamp"],
        mid,
        hx(inp["key_hex"]),
        value,
        inp["max_segment_size"],
        headers,
        header_only=inp["li.record.header.enable"],
    )
    assert headers == before, "the caller's headers must not change"
    assert len(records) == len(case["records"])
    for got, want in zip(records, case["records"], strict=True):
        assert got.topic == want["topic"]
        assert got.partition == want["partition"]
        assert got.timestamp == want["timestamp"]
        assert (None if got.key is None else bytes(got.key)) == hx(want["key_hex"])
        assert (None if got.value is None else bytes(got.value)) == hx(want["value_hex"])
        if want["value_length"] is not None:
            assert len(got.value or b"") == want["value_length"]
        assert [(k, v) for k, v in got.headers] == [(h["key"], hx(h["value_hex"])) for h in want["headers"]]
        if "lm_header_decoded" in want:
            _check_lm(decode_lm(got.headers[-1][1]), want["lm_header_decoded"])
        if want.get("value_as_segment") is not None:
            seg = decode_segment(got.value)
            assert seg is not None
            _check_segment_fields(seg, want["value_as_segment"])


def check_lm_header_encode(case: dict[str, Any]) -> None:
    inp = case["input"]
    mid = uid(inp["message_id"])
    assert mid is not None
    header = LargeMessageHeader(
        inp["type"], mid, inp["segment_number"], inp["number_of_segments"], inp["message_size_in_bytes"]
    )
    out = encode_lm(header)
    assert out.hex() == case["output_hex"]
    assert len(out) == case["output_length"]
    _check_lm(decode_lm(out), case["decoded"])


def check_lm_header_decode(case: dict[str, Any]) -> None:
    raw = hx(case["input_hex"])
    if "exception" in case:
        with pytest.raises(HeaderFormatError):
            decode_lm(raw)
        return
    _check_lm(decode_lm(raw), case["decoded"])


def check_primitive_encodings(case: dict[str, Any]) -> None:
    if "encodeLong_hex" in case:
        assert encode_long(case["value"]).hex() == case["encodeLong_hex"]
    elif "encodeInt_hex" in case:
        assert encode_int(case["int_value"]).hex() == case["encodeInt_hex"]
    else:
        mid = uid(case["uuidToBytes"])
        assert mid is not None
        assert uuid_to_key(mid).hex() == case["hex"]


def check_offset_metadata(case: dict[str, Any]) -> None:
    if case["op"] == "wrapMetadataWithOffset":
        text = wrap_metadata(case["consumer_high_watermark"], case["user_metadata"])
        assert text == case["committed_metadata_string"]
    else:
        text = case["committed_metadata_string"]
    assert offset_from_metadata(text) == case["offsetFromWrappedMetadata"]
    assert user_metadata_from(text) == case["metadataFromWrappedMetadata"]


CHECKS = {name: globals()[f"check_{name}"] for name in SECTIONS}


def test_every_golden_vector() -> None:
    assert set(VECTORS["generator"]["sections_in_this_file"]) == set(SECTIONS)
    passed = 0
    for section in SECTIONS:
        for index, case in enumerate(VECTORS[section]):
            try:
                CHECKS[section](case)
            except AssertionError as exc:
                raise AssertionError(f"{section}[{index}] {case.get('name', '')}: {exc}") from exc
            passed += 1
    print(f"golden vectors: {passed} passed")
    assert passed == 70
