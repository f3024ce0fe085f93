"""Decoding a compressed reference payload as its stored bytes arrive, never more than a step at a time (pure).

A :class:`gateway.PayloadStream` over a compressed payload fetches the stored bytes in ranges and
must hand out the application's bytes without holding either whole. cramjam's decoders work on
whole frames only, so the streaming decoders here are the standard library's ``zlib`` (gzip) and
zstd's reference decoder through ``compression.zstd`` (Python 3.14) or its backport
``backports.zstd``: both take an output limit per call and keep the rest of the input for the next.

What the bounded whole-payload decoders (:mod:`gateway.protocol.compression`) guarantee holds here
too: no call makes more than ``step`` bytes, the total never passes the envelope's size by more
than one step before it is an error, zstd's window is capped (:data:`ZSTD_WINDOW_LOG_MAX`) so a
crafted frame cannot make the decoder allocate more, and only zeros may follow the one frame or
member (the same rule as the whole decoders). A stream that ends before its frame does is truncated.
All of these are :class:`~gateway.errors.PayloadIntegrityError`; the stream adds the record's name.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Iterator
from typing import Any

from gateway.errors import PayloadIntegrityError

Bytes = bytes | bytearray | memoryview

STREAM_DECODED_CODECS = ("zstd", "gzip")
"""The codecs decoded as a stream; an lz4 payload is read whole (no streaming LZ4-frame decoder without a new
dependency), as is one in a store without ranged reads."""
INPUT_SLICE = 128 * 1024
"""Compressed bytes handed to the decoder per call: what a decoder stopped by its output limit keeps (zlib's
``unconsumed_tail`` is a copy of the rest) stays this small, whatever the range's size."""
DECODE_STEP = 1024 * 1024
"""The most decoded bytes a stream takes from its decoder at once (and holds back for the digest check): a
fraction of a range, so a compressed stream's output adds little to its range buffers."""
ZSTD_WINDOW_LOG_MAX = 24
"""16 MiB: the largest zstd window a streamed frame may ask for. Our encoders write level 3 (a 2 MiB window at
most); the cap keeps a crafted frame from making the decoder allocate zstd's default limit (128 MiB)."""


class StreamDecoder:
    """One compressed frame (zstd) or member (gzip) fed piece by piece; output at most ``step`` bytes at a time.

    ``size`` is the application's size the envelope declares: output beyond it is an error at once,
    so a bomb costs at most one step of output before it is refused.
    """

    def __init__(self, codec: str, size: int, step: int) -> None:
        if codec not in STREAM_DECODED_CODECS:
            raise ValueError(f"{codec!r} is not one of the stream-decoded codecs {STREAM_DECODED_CODECS}")
        self.codec = codec
        self.size = size
        self.step = max(1, step)
        self.decoded = 0
        """Bytes handed out so far."""
        self._zstd = codec == "zstd"
        self._decoder: Any = _zstd_decoder() if self._zstd else zlib.decompressobj(wbits=31)  # 31: gzip container
        self._ended = False

    def feed(self, data: Bytes) -> Iterator[bytes]:
        """The output ``data`` makes, in pieces of at most ``step`` bytes; ``data`` is not needed once this ends."""
        if self._ended:
            self._check_padding(data)
            return
        view = memoryview(data).cast("B")
        feed = self._feed_zstd if self._zstd else self._feed_gzip
        try:
            for at in range(0, len(view), INPUT_SLICE):
                if self._ended:
                    self._check_padding(view[at:])
                    return
                yield from feed(view[at : at + INPUT_SLICE])
        except (zlib.error, _ZstdError) as exc:
            raise PayloadIntegrityError(f"{self.codec} payload does not decompress: {exc}") from exc

    def finish(self) -> None:
        """The stored bytes ended: the frame must have ended too, with exactly the envelope's size."""
        if not self._ended:
            raise PayloadIntegrityError(f"{self.codec} payload is truncated: its frame does not end")
        if self.decoded != self.size:
            raise PayloadIntegrityError(
                f"{self.codec} payload decodes to {self.decoded} bytes, its envelope declares {self.size}"
            )

    def _feed_gzip(self, data: Bytes) -> Iterator[bytes]:
        decoder = self._decoder
        pending: Bytes = data
        while True:
            out = decoder.decompress(pending, self.step)
            pending = decoder.unconsumed_tail
            if out:
                yield self._counted(out)
            if decoder.eof:
                self._ended = True
                self._check_padding(decoder.unused_data)
                self._check_padding(pending)
                return
            if not pending and len(out) < self.step:
                return  # all input consumed and nothing more held back

    def _feed_zstd(self, data: Bytes) -> Iterator[bytes]:
        decoder = self._decoder
        out = decoder.decompress(data, self.step)
        while True:
            if out:
                yield self._counted(out)
            if decoder.eof:
                self._ended = True
                self._check_padding(decoder.unused_data)
                return
            if decoder.needs_input:
                return
            out = decoder.decompress(b"", self.step)

    def _counted(self, out: bytes) -> bytes:
        self.decoded += len(out)
        if self.decoded > self.size:
            raise PayloadIntegrityError(
                f"{self.codec} payload decodes to more than the {self.size} bytes its envelope declares"
            )
        return out

    def _check_padding(self, data: Bytes) -> None:
        if memoryview(data).tobytes().strip(b"\x00"):  # rare: only a peer's padding or tampering follows a frame
            raise PayloadIntegrityError(f"{self.codec} payload has bytes after its frame that are not padding")


_zstd_module: Any
if sys.version_info >= (3, 14):  # pragma: no cover - the standard library's own module from 3.14 on
    from compression import zstd as _zstd_module
else:  # pragma: no cover - exercised on the versions CI runs
    try:
        from backports import zstd as _zstd_module
    except ImportError:  # the peers extra is not installed: zstd payloads are read whole
        _zstd_module = None

_ZstdError: type[Exception] = _zstd_module.ZstdError if _zstd_module is not None else zlib.error


def decodes_as_stream(codec: str) -> bool:
    """Whether a payload under ``codec`` is decoded as a stream here: gzip always, zstd with its module
    installed (the ``peers`` extra brings it with cramjam); otherwise the stream reads it whole."""
    return codec == "gzip" or (codec == "zstd" and _zstd_module is not None)


def _zstd_decoder() -> Any:
    assert _zstd_module is not None, "decodes_as_stream() said no"
    parameter = _zstd_module.DecompressionParameter
    return _zstd_module.ZstdDecompressor(options={parameter.window_log_max: ZSTD_WINDOW_LOG_MAX})


__all__ = [
    "DECODE_STEP",
    "INPUT_SLICE",
    "STREAM_DECODED_CODECS",
    "ZSTD_WINDOW_LOG_MAX",
    "StreamDecoder",
    "decodes_as_stream",
]
