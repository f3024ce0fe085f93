"""Decompression bombs for peers' codecs, and the peak RSS decoding one takes.

The bombs come from the codecs' own streaming compressors fed zeros (the zeros are never all in
memory), so they are what a writer really produces at the highest ratio each format allows: zstd
and gzip above 1 000:1, LZ4 ~240:1 (its format cannot pass ~255:1), snappy ~21:1. Hand-built ones
cover what a compressor never writes: one snappy block holding everything, or declaring more than
it holds, and a zstd frame asking for a large window.

Memory is read from Linux's ``/proc/self/status``: writing 5 to ``/proc/self/clear_refs`` starts
the peak (``VmHWM``) again from the current RSS, so the growth is the decoding's alone. cramjam's
decoders allocate natively, where tracemalloc does not look.

Run as ``python -m tests.bombs BLOB CODEC LIMIT ADDRESS_SPACE``: decodes ``BLOB`` in this fresh
process and prints the outcome and the peak RSS growth as JSON.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import cramjam

from gateway.errors import GatewayError
from gateway.protocol.compression import XERIAL_MAGIC, decompress

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def zeros(codec: str, size: int) -> bytes:
    """``size`` zeros through ``codec``'s own streaming compressor a MiB at a time (snappy: the standard framing)."""
    chunk, parts = bytes(MIB), []
    if codec == "gzip":
        deflater = zlib.compressobj(9, wbits=31)
        parts = [deflater.compress(chunk) for _ in range(size // MIB)]
        return b"".join(parts) + deflater.flush()
    compressor = getattr(cramjam, codec).Compressor()
    for _ in range(size // MIB):
        compressor.compress(chunk)
        parts.append(bytes(compressor.flush()))
    return b"".join(parts) + bytes(compressor.finish())


def xerial(*blocks: bytes) -> bytes:
    """xerial's framing (what Kafka's snappy codec writes) around raw snappy blocks."""
    return XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"".join(struct.pack(">I", len(b)) + b for b in blocks)


def snappy_raw_zeros(size: int, declared: int | None = None) -> bytes:
    """A raw snappy block of ``size`` zeros at snappy's highest ratio: one literal, then 64-byte copies of it.

    ``declared`` is the uncompressed size its preamble states, ``size`` unless given.
    """
    varint, n = bytearray(), size if declared is None else declared
    while True:
        varint.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    copies, rest = divmod(size - 1, 64)
    tail = bytes([(rest - 1) << 2 | 2, 1, 0]) if rest else b""  # a copy of ``rest`` bytes at offset 1
    return bytes(varint) + b"\x00\x00" + b"\xfe\x01\x00" * copies + tail


def zstd_window(frame: bytes, window_log: int) -> bytes:
    """``frame`` (no content size, not single-segment) asking for a window of ``2**window_log`` bytes."""
    assert frame[4] == 0 and 10 <= window_log <= 31
    return frame[:5] + bytes([(window_log - 10) << 3]) + frame[6:]


def status(field: str) -> int:
    """A size from ``/proc/self/status`` (``VmRSS:``, ``VmHWM:``, ``VmSize:``), in bytes."""
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) * 1024 for line in lines if line.startswith(field))


def reset_peak() -> int:
    """Start the peak RSS again from the RSS now, which is returned."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    return status("VmRSS:")


def peak_growth(before: int) -> int:
    """How far the RSS rose above ``before`` (from :func:`reset_peak`) at its highest since."""
    return status("VmHWM:") - before


def decode_in_child(tmp_path: Path, blob: bytes, codec: str, limit: int, address_space: int = 0) -> dict[str, object]:
    """What decoding ``blob`` gave in a fresh process: ``size`` or ``error`` and ``message``, and ``growth``.

    With ``address_space``, the child may map only that much more memory (as under strict
    overcommit): an allocation beyond it fails, which native code answers by aborting.
    """
    path = tmp_path / f"{codec}-bomb.bin"
    path.write_bytes(blob)
    done = subprocess.run(
        [sys.executable, "-m", "tests.bombs", str(path), codec, str(limit), str(address_space)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, f"the decoding process died ({done.returncode}): {done.stderr[-2000:]}"
    result: dict[str, object] = json.loads(done.stdout)
    return result


def main() -> None:
    path, codec, limit, address_space = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    blob = Path(path).read_bytes()
    if address_space:
        resource.setrlimit(resource.RLIMIT_AS, (status("VmSize:") + address_space,) * 2)
    result: dict[str, object]
    before = reset_peak()
    try:
        result = {"size": len(decompress(blob, codec, limit))}
    except GatewayError as exc:
        result = {"error": type(exc).__name__, "message": str(exc)}
    result["growth"] = peak_growth(before)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
