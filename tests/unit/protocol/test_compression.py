"""Decompression bombs in peers' blobs: the limit bounds the memory decoding takes, not only the result.

Each bomb (see tests/bombs.py) is decoded in a fresh process whose peak RSS growth is measured:
cramjam's decoders allocate natively, where tracemalloc does not look.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import PayloadIntegrityError
from gateway.protocol.compression import decompress
from tests.bombs import MIB, decode_in_child, snappy_raw_zeros, xerial, zeros, zstd_window

SLACK = 16 * MIB
"""What decoding may take beyond the limit: the decoder's window and block buffer (LZ4's is up to 4 MiB)."""


def test_the_bombs_are_streams_that_decode() -> None:
    """Each builder writes a valid stream: with room enough, it decodes to its zeros (so a bomb is refused for size)."""
    for codec in ("gzip", "zstd", "lz4", "snappy"):
        assert decompress(zeros(codec, 3 * MIB), codec, 3 * MIB) == bytes(3 * MIB)
    assert decompress(xerial(snappy_raw_zeros(3 * MIB + 5)), "snappy", 4 * MIB) == bytes(3 * MIB + 5)
    assert decompress(zstd_window(zeros("zstd", 3 * MIB), 27), "zstd", 4 * MIB) == bytes(3 * MIB)


BOMBS = {
    # name: (codec, limit, blob, bytes it expands to)
    "gzip 64 MiB": ("gzip", MIB, lambda: zeros("gzip", 64 * MIB), 64 * MIB),
    "zstd 1 GiB": ("zstd", MIB, lambda: zeros("zstd", 1024 * MIB), 1024 * MIB),
    "zstd 1 GiB, 128 MiB window": ("zstd", MIB, lambda: zstd_window(zeros("zstd", 1024 * MIB), 27), 1024 * MIB),
    "lz4 128 MiB": ("lz4", MIB, lambda: zeros("lz4", 128 * MIB), 128 * MIB),
    # snappy's ratio is ~21:1, so its bombs need a limit large enough for the blob that carries them
    "snappy xerial, one 128 MiB block": ("snappy", 8 * MIB, lambda: xerial(snappy_raw_zeros(128 * MIB)), 128 * MIB),
    "snappy framed 128 MiB": ("snappy", 8 * MIB, lambda: zeros("snappy", 128 * MIB), 128 * MIB),
}


@pytest.mark.parametrize("name", BOMBS)
def test_a_bomb_is_refused_within_the_limit_of_memory(name: str, tmp_path: Path) -> None:
    codec, limit, build, expands_to = BOMBS[name]
    blob = build()
    assert len(blob) <= limit  # an object the store hands over: the limit bounds what is fetched too
    assert expands_to / len(blob) > (15 if codec == "snappy" else 200 if codec == "lz4" else 1000)
    result = decode_in_child(tmp_path, blob, codec, limit)
    assert result.get("error") == "PayloadIntegrityError", result
    assert f"beyond the limit of {limit} bytes" in str(result["message"])
    assert int(str(result["growth"])) <= limit + SLACK, f"peak RSS grew {int(str(result['growth'])) / MIB:.0f} MiB"


def test_a_declared_size_is_never_allocated(tmp_path: Path) -> None:
    """A snappy block declaring 4 GiB, under an address-space limit (strict overcommit): allocating it aborts."""
    blob = xerial(snappy_raw_zeros(1000, declared=(1 << 32) - 1))
    result = decode_in_child(tmp_path, blob, "snappy", MIB, address_space=256 * MIB)
    assert result.get("error") == "PayloadIntegrityError", result
    assert f"beyond the limit of {MIB} bytes" in str(result["message"])


def test_a_payload_exactly_at_the_limit_is_read() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB that compresses, but not to nothing
    limit = len(payload)
    blobs = {
        "gzip": gzip.compress(payload),
        "zstd": bytes(cramjam.zstd.compress(payload)),
        "lz4": bytes(cramjam.lz4.compress(payload)),
        "snappy": bytes(cramjam.snappy.compress(payload)),
    }
    xerial_blob = xerial(*(bytes(cramjam.snappy.compress_raw(payload[i : i + 32768])) for i in range(0, limit, 32768)))
    for codec, blob in [*blobs.items(), ("snappy", xerial_blob)]:
        assert decompress(blob, codec, limit) == payload, codec
        with pytest.raises(PayloadIntegrityError, match=f"beyond the limit of {limit - 1} bytes"):
            decompress(blob, codec, limit - 1)


LEGIT = {
    "gzip": lambda: zeros("gzip", 32 * MIB),
    "zstd": lambda: zeros("zstd", 32 * MIB),
    "lz4": lambda: zeros("lz4", 32 * MIB),
    "snappy": lambda: zeros("snappy", 32 * MIB),
    "xerial": lambda: xerial(*[bytes(cramjam.snappy.compress_raw(bytes(32768)))] * 1024),  # Kafka's 32 KiB blocks
}


@pytest.mark.parametrize("codec", LEGIT)
def test_a_payload_at_the_limit_costs_one_copy(codec: str, tmp_path: Path) -> None:
    """32 MiB at a 32 MiB limit: the decoded buffer and the one copy the result is, nothing more."""
    result = decode_in_child(tmp_path, LEGIT[codec](), "snappy" if codec == "xerial" else codec, 32 * MIB)
    assert result.get("size") == 32 * MIB, result
    assert int(str(result["growth"])) <= 2 * 32 * MIB + SLACK, (
        f"peak RSS grew {int(str(result['growth'])) / MIB:.0f} MiB"
    )


def test_a_frame_that_lies_about_its_size_is_refused() -> None:
    """A content size smaller than the content: the decoder stops at the declared size."""
    frame = bytes(cramjam.zstd.compress(bytes(200)))
    assert frame[4] & 0xE0 == 0x20 and frame[5] == 200  # single segment, a one-byte content size
    with pytest.raises(PayloadIntegrityError, match="zstd payload expands beyond the 50 bytes its frame allows"):
        decompress(frame[:5] + b"\x32" + frame[6:], "zstd", MIB)


def _pack(codec: str, data: bytes) -> bytes:
    if codec == "gzip":
        return gzip.compress(data)
    if codec == "xerial":
        return xerial(*(bytes(cramjam.snappy.compress_raw(data[i : i + 700])) for i in range(0, len(data), 700)))
    return bytes(getattr(cramjam, codec).compress(data))


@pytest.mark.parametrize("codec", ["gzip", "zstd", "lz4", "snappy", "xerial"])
@given(data=st.binary(max_size=5000), padding=st.integers(0, 64))
def test_round_trip_at_and_below_the_limit(codec: str, data: bytes, padding: int) -> None:
    """Exactly the limit reads back; one byte less is refused as too large, padding or not."""
    name = "snappy" if codec == "xerial" else codec
    packed = _pack(codec, data) + bytes(padding)
    assert decompress(packed, name, len(data)) == data
    assert decompress(packed, name, len(data) + 1000) == data
    if data:
        with pytest.raises(PayloadIntegrityError, match=f"beyond the limit of {len(data) - 1} bytes"):
            decompress(packed, name, len(data) - 1)
