"""The pure pieces of produce_stream: parts, segments, streaming codecs, digests, against the whole-payload forms."""

from __future__ import annotations

import io
import itertools
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import StreamSizeError, StreamSourceError
from gateway.producer.stream.source import SourceReader
from gateway.protocol.compression import decompress
from gateway.protocol.encryption import (
    MIN_SEGMENT_LOG2,
    Binding,
    Encryption,
    PayloadCipher,
    sealed_size,
)
from gateway.protocol.envelope import CHECKSUM_BLAKE3, CHECKSUM_SHA256, digest_of
from gateway.protocol.stream_parts import (
    PartPacker,
    SegmentSealer,
    StreamDigest,
    part_count,
    stream_encoder,
)

KEY = bytes(range(32))
BINDING = Binding("t", uuid.UUID(int=7), "s3", "s3://b/gw/t/00000000-0000-0000-0000-000000000007")


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at the given offsets (sorted, deduplicated, within it)."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@given(st.binary(max_size=5000), st.lists(st.integers(min_value=0), max_size=20), st.integers(1, 700))
def test_parts_have_one_size_but_the_last_and_join_to_the_stream(data: bytes, cuts: list[int], part: int) -> None:
    packer = PartPacker(part)
    parts = [bytes(p) for chunk in cut(data, cuts) for p in packer.feed(chunk)]
    parts += [bytes(p) for p in packer.flush()]
    assert b"".join(parts) == data
    assert len(parts) == part_count(len(data), part)
    assert (all(len(p) == part for p in parts[:-1]) and 0 < len(parts[-1]) <= part) or data == b""


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 3 * 4096 + 100), st.lists(st.integers(min_value=0), max_size=8))
def test_segments_sealed_as_they_come_equal_the_whole_payload_sealed(size: int, cuts: list[int]) -> None:
    fields = Encryption("k1", b"wrapped", bytes(12), MIN_SEGMENT_LOG2)
    data = bytes(i % 251 for i in range(size))
    whole = PayloadCipher(KEY, fields, BINDING, size).seal(data)
    sealer = SegmentSealer(PayloadCipher(KEY, fields, BINDING, size))
    out = bytearray()
    for chunk in cut(data, cuts):
        for segment in sealer.feed(chunk):
            out += segment
    for segment in sealer.finish():
        out += segment
    assert bytes(out) == bytes(whole) and len(out) == sealed_size(size, MIN_SEGMENT_LOG2)


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=20_000), st.lists(st.integers(min_value=0), max_size=10), st.sampled_from(["zstd", "gzip"]))
def test_a_stream_compressed_in_chunks_decodes_as_one_payload(data: bytes, cuts: list[int], codec: str) -> None:
    encoder = stream_encoder(codec)
    stored = b"".join(bytes(encoder.feed(chunk)) for chunk in cut(data, cuts)) + bytes(encoder.finish())
    assert decompress(stored, codec, len(data)) == data


@given(st.binary(max_size=5000), st.lists(st.integers(min_value=0), max_size=10), st.sampled_from([1, 2]))
def test_the_running_digest_is_the_payloads(data: bytes, cuts: list[int], which: int) -> None:
    checksum = CHECKSUM_SHA256 if which == 1 else CHECKSUM_BLAKE3
    digest = StreamDigest(checksum)
    for chunk in cut(data, cuts):
        digest.update(chunk)
    assert digest.digest() == digest_of(checksum, data) and digest.size == len(data)


def read(source: object, size: int) -> bytes:
    return b"".join(bytes(c) for c in SourceReader(source, size, topic="t", key=b"k", read_bytes=7).chunks())


@given(st.binary(max_size=300), st.integers(-3, 3))
def test_a_source_is_held_to_its_declared_size(data: bytes, delta: int) -> None:
    size = max(0, len(data) + delta)
    for source in (io.BytesIO(data), [data[:5], data[5:]]):
        if size == len(data):
            assert read(source, size) == data
        else:
            with pytest.raises(StreamSizeError) as raised:
                read(source, size)
            assert (raised.value.topic, raised.value.key) == ("t", b"k")


def test_what_a_source_raises_is_typed_with_the_cause() -> None:
    def chunks() -> object:
        yield b"abc"
        raise RuntimeError("boom")

    with pytest.raises(StreamSourceError) as raised:
        read(chunks(), 10)
    assert isinstance(raised.value.__cause__, RuntimeError)
    with pytest.raises(StreamSourceError):
        read([b"ab", 3], 3)  # not a bytes-like chunk
    with pytest.raises(TypeError):
        SourceReader(b"bytes are not a stream", 22, topic="t", key=None)
