"""Fixed-bucket histograms the clients fill as they work, for the Prometheus exporter to read.

Latencies and sizes are distributions: a running sum or the last value hides the slow tail an
operator is looking for. The buckets are fixed so that every observation is one bisect and one
add under a lock (a producer's delivery callbacks run on librdkafka's thread), and nothing here
needs ``prometheus_client``.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass

#: Seconds, from a local Redis round trip to a slow multi-megabyte S3 upload.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)
#: Bytes, from a small event to the largest message the demo writes.
SIZE_BUCKETS: tuple[float, ...] = (1e2, 1e3, 1e4, 1e5, 1e6, 4e6, 1e7, 16e6, 64e6, 1e8, 256e6, 1e9)


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """Cumulative counts per upper bound (the last bound is +Inf), the sum and the count."""

    buckets: tuple[tuple[float, int], ...]
    total: float
    count: int


class Histogram:
    __slots__ = ("_bounds", "_counts", "_lock", "_sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = tuple(sorted(bounds))
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        index = bisect_left(self._bounds, value)
        with self._lock:
            self._counts[index] += 1
            self._sum += value

    def snapshot(self) -> HistogramSnapshot:
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, running = [], 0
        for bound, n in zip((*self._bounds, float("inf")), counts, strict=True):
            running += n
            cumulative.append((bound, running))
        return HistogramSnapshot(tuple(cumulative), total, running)


class HistogramSet:
    """Histograms keyed by label values (route, store, operation), created on first use."""

    __slots__ = ("_bounds", "_by_labels", "_lock")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._by_labels: dict[tuple[str, ...], Histogram] = {}
        self._lock = threading.Lock()

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        self.histogram(labels).observe(value)

    def histogram(self, labels: tuple[str, ...]) -> Histogram:
        """The histogram of ``labels``, created on first use; a hot path may keep it."""
        histogram = self._by_labels.get(labels)
        if histogram is None:
            with self._lock:
                histogram = self._by_labels.setdefault(labels, Histogram(self._bounds))
        return histogram

    def snapshot(self) -> dict[tuple[str, ...], HistogramSnapshot]:
        with self._lock:
            items = list(self._by_labels.items())
        return {labels: h.snapshot() for labels, h in items}
