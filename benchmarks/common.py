"""Shared benchmark plumbing: timing, payloads, summaries, memory, reading a topic to the end."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gateway.testing import ApacheKafka, KafkaService, start_kafka
from gateway.testing.demo import pattern_bytes

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parent.parent

Stat = dict[str, Any]
"""``{"median": m, "min": lo, "max": hi, "samples": [...]}``: one figure and its spread."""


def payload(size: int, seed: int) -> bytes:
    return pattern_bytes(f"bench:{seed}", size)


@dataclass
class Measure:
    name: str
    samples: list[float] = field(default_factory=list)  # MB/s (10^6 bytes/s)

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def spread(self) -> tuple[float, float]:
        return (min(self.samples), max(self.samples)) if self.samples else (float("nan"), float("nan"))


def mbps(seconds: float, moved: int) -> float:
    return moved / seconds / 1e6 if seconds > 0 else float("nan")


def stat(samples: Iterable[float]) -> Stat:
    """Median and min-max of the repetitions; NaN when there are none."""
    values = [float(v) for v in samples]
    if not values:
        nan = float("nan")
        return {"median": nan, "min": nan, "max": nan, "samples": []}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "samples": values}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100): with few samples p99 is simply the largest."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def _plain(obj: Any) -> Any:
    return asdict(obj) if hasattr(obj, "__dataclass_fields__") else str(obj)


def save(name: str, data: dict[str, Any]) -> Path:
    """Write ``benchmarks/results/<name>.json`` (or ``name`` itself when it is a path ending in .json)."""
    path = Path(name) if name.endswith(".json") else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_plain))
    tmp.replace(path)
    return path


# -- memory ------------------------------------------------------------------------------------
#
# Peak resident memory of this process, native allocations included (librdkafka's fetch buffers
# live outside Python, so tracemalloc would miss them). Linux keeps the peak in VmHWM and resets it
# when "5" is written to /proc/self/clear_refs.
#
# glibc keeps freed memory for reuse (and, in the heaps of other threads, keeps it even through
# malloc_trim), so a phase that reuses memory freed by an earlier phase shows no RSS growth at all.
# Making glibc hand every large buffer back at once (mmap threshold and trim threshold at 128 KiB)
# fixes that but slows down exactly the variants that allocate more, by page faults, which distorts
# throughput. So memory is measured in a separate, untimed pass in that "lean" mode, and timed runs
# use the "fast" mode: thresholds fixed at what glibc's dynamic tuning settles on for big buffers.

MEMORY_METHOD = (
    "peak RSS growth of the benchmark process while one consumer reads the cell's messages, in a separate "
    "untimed pass: VmHWM after it minus VmRSS before it (VmHWM reset through /proc/self/clear_refs; glibc "
    "set to return freed buffers at once, mmap/trim thresholds 128 KiB, for that pass only); includes "
    "librdkafka's native buffers and the gateway's fetch-ahead threads"
)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_LIBC: Any = None


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        name = ctypes.util.find_library("c")
        try:
            _LIBC = ctypes.CDLL(name) if name else False
        except OSError:
            _LIBC = False
    return _LIBC


def malloc_mode(mode: str) -> bool:
    """``fast`` (timed runs) or ``lean`` (memory passes); False where glibc's mallopt is missing."""
    libc = _libc()
    if not libc or not hasattr(libc, "mallopt"):
        return False
    mmap_threshold, trim_threshold = (32 * 1024 * 1024, 64 * 1024 * 1024) if mode == "fast" else (131072, 131072)
    ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold))
    if mode == "lean" and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
    return ok


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


class PeakMemory:
    """``with PeakMemory() as mem: ...`` then ``mem.growth`` in bytes (NaN where /proc is missing).

    Meaningful in ``malloc_mode("lean")`` only (see above).
    """

    def __init__(self) -> None:
        self.growth = float("nan")
        self._start = 0
        self._ok = False

    def __enter__(self) -> PeakMemory:
        gc.collect()
        libc = _libc()
        if libc and hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
        self._ok = os.path.exists("/proc/self/status") and _reset_peak()
        if self._ok:
            self._start = _status_kib("VmRSS")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._ok:
            self.growth = max(0, _status_kib("VmHWM") - self._start) * 1024.0


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


#: Broker settings a user raises along with ``max.message.bytes`` to send 100 MB records (the raw
#: one-record ceiling does): a produce request must fit the socket limit, and the heap must hold it.
BENCH_BROKER_OVERRIDES = {"socket.request.max.bytes": str(400 * 1024 * 1024)}
BENCH_BROKER_HEAP = "3g"


def bench_kafka(backend: str) -> KafkaService:
    """The benchmark's broker: Apache Kafka with room for 100 MB records, or another backend as it comes."""
    if backend == "kafka":
        return ApacheKafka(heap=BENCH_BROKER_HEAP, overrides=BENCH_BROKER_OVERRIDES)
    return start_kafka(backend)
