"""``reference.compression``: store bytes per payload byte and throughput of each codec, for a compressible
payload (JSON-like text) and an incompressible one (random bytes).

``python -m benchmarks.compression [--repeat 3] [--size-mb 10]`` (or ``gateway bench --suite compression``):
best of ``--repeat`` for each codec on ``--size-mb`` MB of each kind; encode is what the producer adds per
message, decode what the consumer adds (bounded decoding, as it runs). Results go to
``benchmarks/results/compression.json``, which docs/benchmarks.md's compression section is rendered from.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS
from gateway.protocol.payload_encoding import decode_payload, encode_payload

MB = 1_000_000
OUTPUT = RESULTS / "compression.json"
CODECS = (None, "zstd", "lz4", "gzip")


def jsonish(size: int) -> bytes:
    row = b'{"order": %d, "customer": "c-%05d", "sku": "SKU-%04d", "qty": %d, "ok": true}\n'
    rows = (row % (i, i % 9973, i % 811, i % 7) for i in range(size // 40 + 1))
    return b"".join(rows)[:size]


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(size: int, repeat: int) -> list[dict[str, Any]]:
    """One row per payload kind and codec; no codec (stored as it is) has nothing to time."""
    rows: list[dict[str, Any]] = []
    for kind, data in (("JSON-like", jsonish(size)), ("random", os.urandom(size))):
        for codec in CODECS:
            stored = bytes(encode_payload(data, codec))
            assert decode_payload(stored, codec, len(data)) == data
            row: dict[str, Any] = {
                "payload": kind,
                "codec": codec or "none",
                "store_per_payload_byte": len(stored) / len(data),
                "encode_mbps": None,
                "decode_mbps": None,
            }
            if codec is not None:
                enc = best(lambda: encode_payload(data, codec), repeat)  # noqa: B023
                dec = best(lambda: decode_payload(stored, codec, len(data)), repeat)  # noqa: B023
                row["encode_mbps"], row["decode_mbps"] = size / MB / enc, size / MB / dec
            rows.append(row)
    return rows


def main(argv: list[str] | None = None, output: Path = OUTPUT) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compression", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=10)
    args = parser.parse_args(argv)
    started, clock = datetime.now(timezone.utc), time.perf_counter()
    rows = measure(args.size_mb * MB, args.repeat)
    result = {
        "kind": "compression",
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "wall_seconds": time.perf_counter() - clock,
        "size": args.size_mb * MB,
        "repeat": args.repeat,
        "env": {
            "cramjam": importlib.metadata.version("cramjam"),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "rows": rows,
    }
    print("| payload | codec | store bytes per payload byte | encode MB/s | decode MB/s |")
    for r in rows:
        enc, dec = r["encode_mbps"], r["decode_mbps"]
        cells = ("n/a", "n/a") if enc is None else (f"{enc:.0f}", f"{dec:.0f}")
        print(f"| {r['payload']} | {r['codec']} | {r['store_per_payload_byte']:.4f} | {cells[0]} | {cells[1]} |")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
