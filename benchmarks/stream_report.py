"""The page's "Streams larger than memory" section, from ``benchmarks/results/streams.json``.

``gateway bench --suite streams --update-docs`` (``python -m benchmarks.stream_memory --json``) writes
one run per store, each with its own size; this renders them side by side. Issue 43 bounds each
side's peak RSS growth by 128 MiB whatever the message's size, so the table says whether each run
kept it.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS

STREAMS_RESULTS = RESULTS / "streams.json"
MiB = 1024 * 1024
GiB = 1024 * MiB
GROWTH_BOUND = 128 * MiB
"""Issue 43's bound on the producer's and the consumer's peak RSS growth."""

STORE_NAMES = {"redis": "Redis", "s3": "S3 (moto)"}


def load_streams(path: Path | None = None) -> dict[str, Any] | None:
    """The stream runs, or None when absent or not this benchmark's."""
    path = path or STREAMS_RESULTS
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data if data.get("kind") == "streams" and data.get("stores") else None


def _size(n: float) -> str:
    return f"{n / GiB:g} GiB" if n >= GiB else f"{n / MiB:g} MiB"


def _spread(values: Sequence[float], unit: str, digits: int = 1) -> str:
    """The median, with the min-max when several runs were made."""
    mid = statistics.median(values)
    if len(values) < 2:
        return f"{mid:.{digits}f} {unit}"
    return f"{mid:.{digits}f} {unit} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def _rates(size: int, rows: Sequence[dict[str, Any]], key: str) -> list[float]:
    return [size / MiB / row[key] for row in rows]


def _row(store: str, run: dict[str, Any]) -> list[str]:
    size = run["size"]
    produced, raw, consumed = run["produce_stream"], run["raw"], run["consumer"]
    growth = [r["growth_bytes"] for r in produced] + [r["growth_bytes"] for r in consumed]
    return [
        STORE_NAMES.get(store, store),
        _size(size),
        f"{_size(run['part'])} / {_size(run['range'])}",
        _spread([r["growth_bytes"] / MiB for r in produced], "MiB"),
        _spread([r["growth_bytes"] / MiB for r in consumed], "MiB"),
        "yes" if growth and max(growth) < GROWTH_BOUND else "**no**",
        _spread(_rates(size, produced, "seconds"), "MiB/s"),
        _spread(_rates(size, raw, "seconds"), "MiB/s"),
        _spread(_rates(size, consumed, "seconds"), "MiB/s"),
        _spread(_rates(size, consumed, "raw_seconds"), "MiB/s"),
        "yes" if consumed and all(r["digest_equal"] for r in consumed) else "**no**",
    ]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def section_streams(data: dict[str, Any] | None) -> str:
    """One row per store: size, part and range, both sides' peak RSS growth, MiB/s beside the raw client, digests."""
    if data is None or not data.get("stores"):
        return ""
    runs = sorted(data["stores"].items())
    header = [
        "store", "size", "part / range", "producer peak RSS growth", "consumer peak RSS growth", "both < 128 MiB",
        "`produce_stream`", "raw client write", "`PayloadStream` read", "raw client read", "SHA-256 equal",
    ]  # fmt: skip
    notes = [
        f"{STORE_NAMES.get(store, store)}: {run['started']}, {run['pairs']} pair(s), {run['wall_seconds']:.0f} s, "
        f"{run['env']['kafka']} ({run['env']['kafka_backend']} backend), {run['env']['redis']}, "
        f"{run['env']['cpus']} CPUs"
        for store, run in runs
    ]
    return "\n".join(
        [
            "## Streams larger than memory",
            "",
            "From `benchmarks/results/streams.json` (`gateway bench --suite streams --update-docs`, or `python -m "
            "benchmarks.stream_memory --json ...`). A generated stream (1 MiB blocks, never held whole) goes through "
            "`HybridProducer.produce_stream` by reference in a fresh interpreter, up to its delivered envelope; a "
            "second fresh interpreter reads that message as a `PayloadStream` (`value.stream.threshold.bytes=1`, "
            "`readinto` one reused buffer of the range size) and hashes it, and the SHA-256 must equal the "
            "generated stream's. Peak RSS growth is the process's peak (`VmHWM`) over its RSS before the "
            "message. Beside each side, the store's raw client moves the same bytes with the same part or range "
            "size, one at a time: boto3's multipart upload and ranged GETs, redis-py `SET`s and `GET`s of the "
            "entries. MiB/s: the stream's size over the seconds from the first byte to the delivered envelope "
            "(producer) or to the stream's end (consumer). Median (min-max) when several pairs ran.",
            "",
            _table(header, [_row(store, run) for store, run in runs]),
            "",
            "Runs: " + "; ".join(notes) + ". moto copies the whole object for each ranged GET, which bounds both S3 "
            "read columns; Redis and moto run on loopback, on the same cores as the broker and both clients, on a "
            "machine shared with other jobs. Larger S3 runs: `python -m benchmarks.stream_memory --stores s3 --gib 4 "
            "--json benchmarks/results/streams.json` (about 25 minutes), then `python -m benchmarks.report`.",
        ]
    )
