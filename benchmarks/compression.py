"""``reference.compression``: store bytes per payload byte and throughput of each codec, for a compressible
payload (JSON-like text) and an incompressible one (random bytes).

Run ``python -m benchmarks.compression``: best of ``--repeat`` for each codec on 10 MB of each kind; encode is
what the producer adds per message, decode what the consumer adds (bounded decoding, as it runs). The
figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import time

from gateway.protocol.payload_encoding import decode_payload, encode_payload

MB = 1_000_000


def jsonish(size: int) -> bytes:
    row = b'{"order": %d, "customer": "c-%05d", "sku": "SKU-%04d", "qty": %d, "ok": true}\n'
    rows = (row % (i, i % 9973, i % 811, i % 7) for i in range(size // 40 + 1))
    return b"".join(rows)[:size]


def best(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=10)
    args = parser.parse_args()
    size = args.size_mb * MB
    print("| payload | codec | store bytes per payload byte | encode MB/s | decode MB/s |")
    print("|---|---|---|---|---|")
    for kind, data in (("JSON-like", jsonish(size)), ("random", os.urandom(size))):
        for codec in (None, "zstd", "lz4", "gzip"):
            stored = bytes(encode_payload(data, codec))
            assert decode_payload(stored, codec, len(data)) == data
            enc = best(lambda: encode_payload(data, codec), args.repeat)  # noqa: B023
            dec = best(lambda: decode_payload(stored, codec, len(data)), args.repeat)  # noqa: B023
            ratio = len(stored) / len(data)
            if codec is None:  # stored as it is: nothing to time
                print(f"| {kind} | none | {ratio:.4f} | n/a | n/a |")
                continue
            print(f"| {kind} | {codec} | {ratio:.4f} | {size / MB / enc:.0f} | {size / MB / dec:.0f} |")


if __name__ == "__main__":
    main()
