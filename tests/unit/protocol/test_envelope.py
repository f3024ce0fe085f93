"""The reference envelope codec: round trips, corruption, and never confusing it with a segment or a payload."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import struct
import time
import uuid
import zlib

import blake3
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.errors import EnvelopeFormatError, PayloadIntegrityError
from gateway.protocol.envelope import (
    CHECKSUM_BLAKE3,
    CHECKSUM_SHA256,
    DEFAULT_CHECKSUM,
    ENVELOPE_HEADER,
    MAGIC,
    MAX_ENVELOPE_BYTES,
    MAX_LOCATOR_BYTES,
    MAX_PAYLOAD_SIZE,
    MIN_ENVELOPE_BYTES,
    Envelope,
    decode_envelope,
    encode_envelope,
    envelope_header,
    is_envelope_record,
    looks_like_envelope,
)
from gateway.protocol.segments import decode_segment, encode_segment
from tests.unit.protocol.test_protocol_properties import reference_is_segment

store_names = st.from_regex(r"[a-z0-9_.-]{1,64}", fullmatch=True)
# Any printable text: the codec must carry non-ASCII locators even though our stores never write them.
locator_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=MAX_LOCATOR_BYTES // 4
).filter(lambda s: 1 <= len(s.encode()) <= MAX_LOCATOR_BYTES)
sizes = st.one_of(st.integers(0, MAX_PAYLOAD_SIZE), st.sampled_from([0, 1, 2**32, 2**53 - 1, MAX_PAYLOAD_SIZE]))
digests = st.binary(min_size=32, max_size=32)


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope:
    checksum = draw(st.sampled_from([CHECKSUM_SHA256, CHECKSUM_BLAKE3]))
    return Envelope(draw(store_names), draw(locator_text), draw(sizes), draw(digests), draw(st.uuids()), 1, checksum)


def sample(locator: str = "gw:orders:00000000-0000-0000-0000-000000000001#1", store: str = "redis") -> Envelope:
    return Envelope(store, locator, 5, hashlib.sha256(b"hello").digest(), uuid.UUID(int=1))


def largest() -> Envelope:
    # 2-byte UTF-8 characters up to the byte limit: the longest value the codec can produce.
    return Envelope("s" * 64, "é" * (MAX_LOCATOR_BYTES // 2), MAX_PAYLOAD_SIZE, b"\xff" * 32, uuid.UUID(int=2**128 - 1))


def raw(
    *,
    magic: bytes = MAGIC,
    version: int = 1,
    flags: int = 0,
    size: int = 5,
    alg: int = 1,
    digest: bytes = b"\x11" * 32,
    mid: bytes = b"\x22" * 16,
    store: bytes = b"redis",
    locator: bytes = b"gw:t:00000000-0000-0000-0000-000000000001#1",
    trailing: bytes = b"",
) -> bytes:
    """An envelope built field by field, independently of the codec, with a *valid* CRC.

    Lets each semantic check be reached on its own: without a correct CRC every defect would be
    reported as corruption and the later checks would never run.
    """
    body = (
        magic
        + struct.pack(">BBQB", version, flags, size, alg)
        + digest
        + mid
        + struct.pack(">B", len(store))
        + store
        + struct.pack(">H", len(locator))
        + locator
    )
    return body + struct.pack(">I", zlib.crc32(body)) + trailing


# -- layout ---------------------------------------------------------------------------------


def test_layout_is_pinned_field_by_field() -> None:
    env = sample()
    assert encode_envelope(env) == raw(
        digest=env.digest, mid=env.message_id.bytes, locator=env.locator.encode(), size=5
    )
    value = encode_envelope(env)
    assert value[:6] == b"\x1bGWREF" and value[6] == 1 and value[7] == 0
    assert int.from_bytes(value[8:16], "big") == 5 and value[16] == 1 and value[17:49] == env.digest
    assert value[49:65] == env.message_id.bytes and value[65] == len("redis") and value[66:71] == b"redis"
    assert int.from_bytes(value[-4:], "big") == zlib.crc32(value[:-4])


def test_size_limits_are_under_one_kilobyte() -> None:
    assert MAX_ENVELOPE_BYTES < 1000
    assert len(encode_envelope(largest())) == MAX_ENVELOPE_BYTES
    smallest = Envelope("r", "x", 0, b"\0" * 32, uuid.UUID(int=0))
    assert len(encode_envelope(smallest)) == MIN_ENVELOPE_BYTES


def test_header() -> None:
    assert envelope_header() == (ENVELOPE_HEADER, b"\x01")
    assert ENVELOPE_HEADER == "_gw.ref"
    with pytest.raises(EnvelopeFormatError):
        envelope_header(2)


# -- round trip -----------------------------------------------------------------------------


@settings(max_examples=500)
@given(envelopes())
def test_round_trip(env: Envelope) -> None:
    value = encode_envelope(env)
    assert len(value) <= MAX_ENVELOPE_BYTES
    assert looks_like_envelope(value)
    assert decode_envelope(value) == env
    assert decode_envelope(memoryview(value)) == env
    assert decode_envelope(bytearray(value)) == env


def test_for_payload_and_verify() -> None:
    payload = os.urandom(1000)
    sha = Envelope.for_payload(payload, store="s3", locator="s3://b/k", message_id=uuid.uuid4(), checksum=1)
    assert sha.size == 1000 and sha.digest == hashlib.sha256(payload).digest() and sha.checksum == CHECKSUM_SHA256
    b3 = Envelope.for_payload(payload, store="redis", locator="gw/k", message_id=uuid.uuid4())
    assert b3.checksum == CHECKSUM_BLAKE3 == DEFAULT_CHECKSUM and b3.digest == blake3.blake3(payload).digest()
    for env, name in ((sha, "SHA-256"), (b3, "BLAKE3")):
        env.verify(payload)
        with pytest.raises(PayloadIntegrityError, match="bytes"):
            env.verify(payload[:-1])
        with pytest.raises(PayloadIntegrityError, match=name):
            env.verify(bytes([payload[0] ^ 1]) + payload[1:])


def test_the_checksum_byte_travels_and_unknown_ones_are_refused() -> None:
    b3 = Envelope.for_payload(b"hello", store="redis", locator="gw/k", message_id=uuid.UUID(int=3))
    value = encode_envelope(b3)
    assert value[16] == CHECKSUM_BLAKE3 and value[17:49] == blake3.blake3(b"hello").digest()
    assert decode_envelope(value) == b3
    for unknown in (0, 3, 255):
        forged = bytearray(value[:-4])
        forged[16] = unknown
        forged += struct.pack(">I", zlib.crc32(forged))
        with pytest.raises(EnvelopeFormatError, match="unknown checksum algorithm"):
            decode_envelope(bytes(forged))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"store": ""},
        {"store": "Redis"},
        {"store": "s" * 65},
        {"store": "red is"},
        {"store": "rédis"},
        {"locator": ""},
        {"locator": "x" * (MAX_LOCATOR_BYTES + 1)},
        {"locator": "é" * (MAX_LOCATOR_BYTES // 2 + 1)},
        {"locator": "a\nb"},
        {"locator": "a\x00b"},
        {"locator": "a\x85b"},
        {"locator": "\ud800"},
        {"size": -1},
        {"size": MAX_PAYLOAD_SIZE + 1},
        {"size": True},
        {"size": 1.0},
        {"digest": b"\0" * 31},
        {"digest": b"\0" * 33},
        {"digest": "0" * 32},
        {"checksum": 0},
        {"checksum": 3},
        {"message_id": "00000000-0000-0000-0000-000000000001"},
        {"version": 0},
        {"version": 2},
    ],
)
def test_invalid_fields_are_refused_at_construction(kwargs: dict[str, object]) -> None:
    fields: dict[str, object] = {
        "store": "redis",
        "locator": "loc",
        "size": 1,
        "digest": b"\0" * 32,
        "message_id": uuid.UUID(int=1),
    }
    fields.update(kwargs)
    with pytest.raises(EnvelopeFormatError):
        Envelope(**fields)  # type: ignore[arg-type]
    assert issubclass(EnvelopeFormatError, ValueError)


# -- corruption -----------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_raise_only_envelope_format_error(data: bytes) -> None:
    for value in (data, MAGIC + data, MAGIC + b"\x01" + data, MAGIC + b"\x01\x00" + data):
        with contextlib.suppress(EnvelopeFormatError):  # any other exception fails the test
            decode_envelope(value)


@settings(max_examples=300)
@given(envelopes(), st.data())
def test_mutated_envelopes_raise_only_envelope_format_error(env: Envelope, data: st.DataObject) -> None:
    value = bytearray(encode_envelope(env))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["set", "insert", "delete"]))
        pos = data.draw(st.integers(0, len(value) - 1))
        if op == "set":
            value[pos] = data.draw(st.integers(0, 255))
        elif op == "insert":
            value[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        elif len(value) > 1:
            del value[pos]
    try:
        decoded = decode_envelope(bytes(value))
    except EnvelopeFormatError:
        return
    assert decoded == env and bytes(value) == encode_envelope(env)  # only an identity mutation may decode


@pytest.mark.parametrize(
    "env",
    [sample(), largest(), Envelope("r", "x", 0, b"\0" * 32, uuid.UUID(int=0))],
    ids=["typical", "largest", "smallest"],
)
def test_every_truncation_and_every_byte_change_is_detected(env: Envelope) -> None:
    value = encode_envelope(env)
    for cut in range(len(value)):
        with pytest.raises(EnvelopeFormatError):
            decode_envelope(value[:cut])
    for extra in (b"\0", b"\xff" * 7):
        with pytest.raises(EnvelopeFormatError, match=r"trailing|at most"):
            decode_envelope(value + extra)
    mutable = bytearray(value)
    for pos in range(len(value)):
        original = mutable[pos]
        for delta in range(1, 256):
            mutable[pos] = original ^ delta
            with pytest.raises(EnvelopeFormatError):
                decode_envelope(bytes(mutable))
        mutable[pos] = original


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "missing"),
        (b"", "magic"),
        (b"\x1bGWRE", "magic"),
        (b"\x1bGWREF", "version"),
        (raw(version=2), "version 2"),
        (raw(version=0), "version 0"),
        (raw(flags=8), "flags"),
        (raw(flags=4), "encryption block"),
        (raw(flags=5), "encryption block"),
        (raw(flags=0x80), "flags"),
        (raw(alg=0), "algorithm"),
        (raw(alg=3), "algorithm"),
        (raw(size=MAX_PAYLOAD_SIZE + 1), "2\\*\\*53"),
        (raw(size=2**64 - 1), "2\\*\\*53"),
        (raw(store=b""), "store name length"),
        (raw(store=b"s" * 65), "store name length"),
        (raw(store=b"Redis"), "store name"),
        (raw(store=b"r\xc3\xa9"), "not valid"),
        (raw(locator=b""), "locator length"),
        (raw(locator=b"x" * (MAX_LOCATOR_BYTES + 1)), "locator length|at most"),
        (raw(locator=b"\xff\xfe"), "not valid"),
        (raw(locator=b"\xed\xa0\x80"), "not valid"),  # an encoded surrogate
        (raw(locator=b"a\x1b[31mb"), "control"),
        (raw(trailing=b"\0"), "trailing"),
        (raw()[:-1] + bytes([raw()[-1] ^ 1]), "CRC"),
        (b"\x1bGWREF\x01" + b"\0" * 2000, "at most"),
    ],
)
def test_specific_defects_have_clear_messages(value: bytes | None, message: str) -> None:
    with pytest.raises(EnvelopeFormatError, match=message):
        decode_envelope(value)


def test_checks_that_only_a_valid_crc_reaches_still_pass_on_the_reference_builder() -> None:
    decoded = decode_envelope(raw())
    assert decoded.store == "redis" and decoded.size == 5 and decoded.message_id == uuid.UUID(bytes=b"\x22" * 16)


# -- never confused with segments or payloads -----------------------------------------------


@settings(max_examples=500)
@given(envelopes())
def test_an_envelope_is_never_a_linkedin_segment(env: Envelope) -> None:
    value = encode_envelope(env)
    assert decode_segment(value) is None
    assert not reference_is_segment(value)
    assert int.from_bytes(value[:1], "big", signed=True) > 0  # LinkedIn rejects on the version byte alone


@settings(max_examples=500)
@given(
    st.uuids(), st.integers(0, 2**31 - 1), st.integers(1, 2**31 - 1), st.integers(0, 2**31 - 1), st.binary(max_size=200)
)
def test_a_linkedin_segment_never_looks_like_an_envelope(
    mid: uuid.UUID, seq: int, nseg: int, size: int, chunk: bytes
) -> None:
    value = encode_segment(mid, seq, nseg, size, chunk)
    assert not looks_like_envelope(value)
    assert not is_envelope_record(value, [("_lm", b"x")])
    with pytest.raises(EnvelopeFormatError):
        decode_envelope(value)


@settings(max_examples=500)
@given(st.binary(max_size=64))
def test_random_bytes_do_not_look_like_an_envelope(data: bytes) -> None:
    assume(not data.startswith(MAGIC))  # the one 2**-48 case, which hypothesis never generates anyway
    assert not looks_like_envelope(data)


def test_os_random_bytes_do_not_look_like_an_envelope() -> None:
    assert not any(looks_like_envelope(os.urandom(32)) for _ in range(100_000))


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x1b",
        b"\x1bGWRE",
        json.dumps({"a": 1}).encode(),
        b"  [1,2]",
        b"\xef\xbb\xbf{}",
        b"<xml/>",
        b"\x00\x00\x00\x00\x01avro-with-schema-registry-id",
        b"\x00flag",
        b"\x01flag",
        b"\x08\x96\x01",
        b"\x1b[31mred log line\x1b[0m",
        b"\x1bLuaT\x00",
        b"\x1bE\x1b&l0O",
        b"\x1bGWRE_almost",
        b"\x1bgwref\x01",
        gzip.compress(b"x"),
        b"\x28\xb5\x2f\xfd",
        b"\x89PNG\r\n",
        b"PAR1",
        b"\xff\xd8\xff",
    ],
)
def test_common_payloads_are_not_envelopes(payload: bytes) -> None:
    assert not looks_like_envelope(payload)
    assert not is_envelope_record(payload, [("content-type", b"x")])
    assert not is_envelope_record(payload, None)


def test_is_envelope_record_uses_header_or_magic() -> None:
    value = encode_envelope(sample())
    assert is_envelope_record(value, None)  # headers lost: the magic still says so
    assert is_envelope_record(value, [])
    assert is_envelope_record(b"not-an-envelope", [envelope_header()])  # header wins; decode then reports it
    assert is_envelope_record(None, [(ENVELOPE_HEADER, None)])
    assert not is_envelope_record(b"plain", [("_gw.refx", b"\x01"), ("_lm", b"")])
    assert not is_envelope_record(None, None)
    with pytest.raises(EnvelopeFormatError):
        decode_envelope(b"not-an-envelope")


def test_looks_like_envelope_accepts_buffers_and_is_constant_time() -> None:
    value = encode_envelope(sample())
    assert looks_like_envelope(value) and looks_like_envelope(bytearray(value))
    assert looks_like_envelope(memoryview(value)) and not looks_like_envelope(None)
    assert not looks_like_envelope(b"\x1b")
    # A 200 MB value that starts with the magic: copying it even once would take tens of ms.
    big = bytearray(200 * 1024 * 1024)
    big[: len(MAGIC)] = MAGIC
    view = memoryview(big)
    started = time.perf_counter()
    for _ in range(100):
        assert looks_like_envelope(big) and looks_like_envelope(view)
    assert time.perf_counter() - started < 0.05
