"""The incremental decoders a compressed :class:`gateway.PayloadStream` reads through (core.streams.decoding).

The frames are the ones the producer writes: ``encode_payload`` (``produce``: cramjam's zstd, zlib's
gzip member) and the streaming encoders of ``produce_stream`` (``stream_encoder``), so what is checked
is that a frame written by one library decodes through another, split anyhow.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.streams.decoding import ZSTD_WINDOW_LOG_MAX, StreamDecoder, decodes_as_stream
from gateway.errors import PayloadIntegrityError
from gateway.protocol.payload_encoding import encode_payload
from gateway.protocol.stream_parts import stream_encoder
from tests.helpers import payload

CODECS = ("zstd", "gzip")
VALUE = payload(300_000, 3) + os.urandom(20_000) + bytes(200_000)


def whole_frame(value: bytes, codec: str) -> bytes:
    return bytes(encode_payload(value, codec))


def streamed_frame(value: bytes, codec: str, chunk: int = 70_000) -> bytes:
    encoder = stream_encoder(codec)
    parts = [bytes(encoder.feed(memoryview(value)[at : at + chunk])) for at in range(0, len(value), chunk)]
    return b"".join([*parts, bytes(encoder.finish())])


def decode(frame: bytes, codec: str, size: int, cuts: Iterable[int], step: int) -> tuple[bytes, int]:
    """The decoded bytes of ``frame`` fed in the pieces ``cuts`` make; and the largest piece of output."""
    decoder = StreamDecoder(codec, size, step)
    out, largest, at = bytearray(), 0, 0
    for cut in [*sorted(cuts), len(frame)]:
        for piece in decoder.feed(memoryview(frame)[at:cut]):
            out += piece
            largest = max(largest, len(piece))
        at = cut
    decoder.finish()
    return bytes(out), largest


FRAMES = {
    (codec, how): maker(VALUE, codec)
    for codec in CODECS
    for how, maker in (("whole", whole_frame), ("stream", streamed_frame))
}


def test_both_codecs_decode_as_streams_with_the_backport_installed() -> None:
    assert decodes_as_stream("gzip") and decodes_as_stream("zstd") and not decodes_as_stream("lz4")


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(sorted(FRAMES)),
    st.lists(st.floats(min_value=0, max_value=1), max_size=12),
    st.integers(min_value=1, max_value=200_000),
)
def test_any_split_of_a_frame_into_ranges_decodes_to_the_same_bytes(
    key: tuple[str, str], fractions: list[float], step: int
) -> None:
    frame = FRAMES[key]
    cuts = [int(f * len(frame)) for f in fractions]
    out, largest = decode(frame, key[0], len(VALUE), cuts, step)
    assert out == VALUE and largest <= step


@pytest.mark.parametrize("codec", CODECS)
def test_an_empty_payload_decodes_to_nothing(codec: str) -> None:
    assert decode(whole_frame(b"", codec), codec, 0, [], 10) == (b"", 0)


@pytest.mark.parametrize("codec", CODECS)
def test_a_bomb_is_refused_after_at_most_one_step_of_output(codec: str) -> None:
    bomb = whole_frame(bytes(64 << 20), codec)  # 64 MiB of zeros in a few kilobytes
    assert len(bomb) < 100_000
    decoder = StreamDecoder(codec, 1000, 1 << 16)  # the envelope says 1000 bytes
    made = 0
    with pytest.raises(PayloadIntegrityError, match="more than the 1000 bytes"):
        for piece in decoder.feed(bomb):
            made += len(piece)
            assert len(piece) <= 1 << 16
    assert made <= 1 << 16


@pytest.mark.parametrize("codec", CODECS)
def test_a_truncated_frame_raises_at_the_end(codec: str) -> None:
    frame = FRAMES[(codec, "stream")]
    with pytest.raises(PayloadIntegrityError, match="truncated"):
        decode(frame[: len(frame) - 7], codec, len(VALUE), [1000], 1 << 16)


@pytest.mark.parametrize("codec", CODECS)
def test_a_tampered_frame_raises_or_decodes_to_other_bytes(codec: str) -> None:
    frame = bytearray(FRAMES[(codec, "whole")])
    frame[len(frame) // 2] ^= 0x40
    try:
        out, _ = decode(bytes(frame), codec, len(VALUE), [], 1 << 16)
    except PayloadIntegrityError:
        return
    assert out != VALUE  # the stream's digest check catches what the codec's own check did not


@pytest.mark.parametrize("codec", CODECS)
def test_only_zeros_may_follow_the_frame(codec: str) -> None:
    frame = FRAMES[(codec, "whole")]
    assert decode(frame + bytes(100), codec, len(VALUE), [len(frame) - 3, len(frame) + 50], 1 << 20)[0] == VALUE
    with pytest.raises(PayloadIntegrityError, match="not padding"):
        decode(frame + b"\x00\x01", codec, len(VALUE), [len(frame) + 1], 1 << 20)


@pytest.mark.parametrize("codec", CODECS)
def test_a_frame_shorter_than_the_envelope_declares_raises(codec: str) -> None:
    with pytest.raises(PayloadIntegrityError, match="declares"):
        decode(FRAMES[(codec, "whole")], codec, len(VALUE) + 1, [], 1 << 20)


def test_a_zstd_frame_asking_for_a_larger_window_than_the_cap_is_refused() -> None:
    # magic, a descriptor without single-segment (so a window byte follows), a 2**27-byte window
    # (exponent 17 above 2**10), then one empty raw block marked last: a valid frame that zstd's
    # default limit would accept and allocate for
    crafted = b"\x28\xb5\x2f\xfd" + bytes([0x00, (27 - 10) << 3]) + b"\x01\x00\x00"
    assert ZSTD_WINDOW_LOG_MAX < 27
    with pytest.raises(PayloadIntegrityError, match="does not decompress"):
        decode(crafted, "zstd", 0, [], 1 << 16)
    small = b"\x28\xb5\x2f\xfd" + bytes([0x00, (20 - 10) << 3]) + b"\x01\x00\x00"
    assert decode(small, "zstd", 0, [], 1 << 16) == (b"", 0)
