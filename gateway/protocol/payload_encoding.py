"""How a reference payload is encoded in its store: ``reference.compression`` (pure: no store, no clock).

A producer with ``reference.compression=zstd|lz4|gzip`` stores :func:`encode_payload`'s output and
says so in the envelope (its flags byte, :data:`CODEC_IDS`); the envelope's size and checksum stay
those of what the application sent, so a consumer checks the very bytes it hands out. The consumer
decodes with :func:`decode_payload`, which never makes more than the envelope's size (the bounded
decoders of :mod:`gateway.protocol.compression`) and refuses a stored object larger than the codec
can produce from that many bytes (:func:`stored_bound`) before decoding it. ``none`` (the default)
stores the payload as it is, and an envelope without the flag is read as before.

The codec is set per producer and applied per payload: the writer stores a payload as it is when
samples of it do not compress (:func:`gateway.protocol.compression.pays_off`), since random or
already compressed bytes would cost the codec's full time and its framing for nothing saved.
"""

from __future__ import annotations

import zlib
from typing import Literal

from gateway.errors import ConfigurationError, PayloadIntegrityError
from gateway.protocol.compression import decompress

Codec = Literal["zstd", "lz4", "gzip"]
CODEC_IDS: dict[str, int] = {"zstd": 1, "lz4": 2, "gzip": 3}
"""The codec's id in the envelope's flags byte (its low two bits); 0 is a payload stored as it is."""
CODECS_BY_ID: dict[int, str] = {number: name for name, number in CODEC_IDS.items()}
COMPRESSION_SETTINGS = ("none", *CODEC_IDS)
"""The values of ``reference.compression``."""
_ZSTD_LEVEL = 3
_GZIP_LEVEL = 6


def parse_compression(value: object) -> str | None:
    """``reference.compression`` as a codec name, ``None`` for ``none``; :class:`ConfigurationError` otherwise."""
    name = "none" if value is None else str(value).strip().lower()
    if name not in COMPRESSION_SETTINGS:
        raise ConfigurationError(
            f"reference.compression must be one of {', '.join(COMPRESSION_SETTINGS)}, not {value!r:.40}"
        )
    return None if name == "none" else name


def encode_payload(payload: bytes | bytearray | memoryview, codec: str | None) -> bytes | bytearray | memoryview:
    """What the store keeps for ``payload``: the payload itself without a codec, else its compressed form."""
    if codec is None:
        return payload
    if codec == "gzip":
        compressor = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: the gzip container
        return compressor.compress(payload) + compressor.flush()
    import cramjam

    if codec == "zstd":
        return bytes(cramjam.zstd.compress(payload, level=_ZSTD_LEVEL))
    if codec == "lz4":
        # the LZ4 frame format, as bakdata's blobs; level 1 is LZ4's fast mode (cramjam's default is its
        # high-compression level 4, many times slower for a fraction of a percent: docs/benchmarks.md)
        return bytes(cramjam.lz4.compress(payload, level=1))
    raise ConfigurationError(f"unknown payload codec {codec!r}")


def stored_bound(codec: str, size: int) -> int:
    """The most bytes ``codec`` can make of ``size`` bytes (its worst case on incompressible input, rounded up)."""
    if codec == "gzip":
        return size + 5 * (size // 16_000 + 1) + 64
    return size + size // 255 + 4096  # zstd and the LZ4 frame: well above both compressBound formulas


def decode_payload(stored: bytes, codec: str | None, size: int) -> bytes:
    """The application's bytes from what the store kept: never more than ``size`` of them (then an integrity error).

    The envelope's checksum is checked by the caller on the result, as for any payload.
    """
    if codec is None:
        return stored
    if len(stored) > stored_bound(codec, size):
        raise PayloadIntegrityError(
            f"stored {codec} payload has {len(stored)} bytes, more than {codec} makes of {size}: not this envelope's"
        )
    return decompress(stored, codec, size)


__all__ = [
    "CODECS_BY_ID",
    "CODEC_IDS",
    "COMPRESSION_SETTINGS",
    "Codec",
    "decode_payload",
    "encode_payload",
    "parse_compression",
    "stored_bound",
]
