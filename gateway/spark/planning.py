"""Sans-IO planning: offset bounds per partition, splitting into ranges, rate limits, offset JSON.

Everything here is a pure function of watermarks and options, so the planner's decisions (which
range goes to which task, how a trigger's budget is shared) can be tested without Spark or Kafka.
The one rule the planner must keep is that ranges of a partition tile it without gaps or overlap:
the reading side then guarantees that each message is emitted by exactly one range.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.protocol.records import TopicPartitionKey
from gateway.spark.options import EARLIEST, LATEST, OffsetSpec, OptionError, TimestampSpec

Watermarks = Mapping[TopicPartitionKey, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one partition, read by one Spark task.

    ``from_earliest`` says the start was "whatever the log begins with" rather than an offset a
    user or a checkpoint asked for, so finding the log to start later is not data loss.
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    from_earliest: bool = False

    @property
    def tp(self) -> TopicPartitionKey:
        return (self.topic, self.partition)

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)


class DataLossError(RuntimeError):
    """Offsets that were asked for are gone (retention, truncation, a deleted partition).

    Raised only with ``failOnDataLoss=true``; otherwise the reader goes on with what is left.
    """


def resolve_offset(requested: int, watermarks: tuple[int, int]) -> int:
    """An absolute offset for a requested one (:data:`EARLIEST` / :data:`LATEST` / absolute)."""
    low, high = watermarks
    if requested == EARLIEST:
        return low
    if requested == LATEST:
        return high
    return requested


def offsets_by_time(
    spec: OffsetSpec,
    times: TimestampSpec | None,
    found: Mapping[TopicPartitionKey, int],
    *,
    name: str,
    missing: str,
) -> OffsetSpec:
    """``spec`` with the partitions that have a timestamp replaced by the offset found for it.

    ``found`` is what Kafka answered (``offsets_for_times``): the first offset whose record is at
    or after the timestamp, -1 when no record is. That offset is where the range starts or ends,
    and a range owns the messages whose last segment lies in it, so a chunked message goes whole
    to the side of the timestamp its own timestamp is on (all its segments carry the same one).
    ``missing`` says what -1 becomes: ``latest`` (the end of the log) or ``error``.
    """
    if times is None:
        return spec
    specific = dict(spec.specific) if spec.kind == "specific" else {}
    for tp, offset in found.items():
        if offset >= 0:
            specific[tp] = offset
        elif missing == "latest":
            specific[tp] = LATEST
        else:
            raise OptionError(
                f"{name}: no record of {tp[0]}[{tp[1]}] has a timestamp at or after {times.for_partition(tp)}"
                " (startingOffsetsByTimestampStrategy=latest starts at the end instead)"
            )
    fallback = spec.default if spec.kind == "specific" else (EARLIEST if spec.kind == "earliest" else LATEST)
    return OffsetSpec("specific", tuple(sorted(specific.items())), fallback)


def check_names_all(name: str, named: Iterable[TopicPartitionKey], partitions: Iterable[TopicPartitionKey]) -> None:
    """Per-partition JSON must name exactly the partitions the query reads, as Spark's Kafka source requires.

    Spark fails the query when the partitions named differ from those assigned, in either direction
    ("If startingOffsets contains specific offsets, you must specify all TopicPartitions"), for a
    batch's starting and ending offsets, a stream's starting offsets and timestamps by partition.
    A partition left out would otherwise be read from a default the user never wrote down.
    """
    given, found = set(named), set(partitions)
    if given == found:
        return

    def show(tps: set[TopicPartitionKey]) -> str:
        return ", ".join(f"{t}[{p}]" for t, p in sorted(tps)) or "none"

    raise OptionError(
        f"{name} must name every partition the query reads, as Spark's Kafka source requires"
        f" (-2 earliest, -1 latest): missing {show(found - given)}; not read by the query {show(given - found)}"
    )


def check_specs_name_all(
    partitions: Iterable[TopicPartitionKey],
    *specs: tuple[str, OffsetSpec | TimestampSpec | None],
) -> None:
    """:func:`check_names_all` for every explicit per-partition spec among ``specs``."""
    found = list(partitions)
    for name, spec in specs:
        explicit = isinstance(spec, OffsetSpec) and spec.kind == "specific"
        if explicit or (isinstance(spec, TimestampSpec) and spec.every is None):
            assert spec is not None
            check_names_all(name, (tp for tp, _ in spec.specific), found)


def timestamps_wanted(
    times: TimestampSpec | None, partitions: Iterable[TopicPartitionKey]
) -> dict[TopicPartitionKey, int]:
    """The partitions to ask ``offsets_for_times`` about, with their timestamps."""
    if times is None:
        return {}
    out: dict[TopicPartitionKey, int] = {}
    for tp in partitions:
        ts = times.for_partition(tp)
        if ts is not None:
            out[tp] = ts
    return out


def batch_ranges(
    starting: OffsetSpec, ending: OffsetSpec, watermarks: Watermarks, *, fail_on_data_loss: bool
) -> list[OffsetRange]:
    """One range per partition for a batch query, before any splitting."""
    out: list[OffsetRange] = []
    for tp in sorted(watermarks):
        wm = watermarks[tp]
        requested_start = starting.for_partition(tp)
        start = resolve_offset(requested_start, wm)
        end = resolve_offset(ending.for_partition(tp), wm)
        if end > wm[1]:
            raise OptionError(f"endingOffsets for {tp[0]}[{tp[1]}] is {end}, beyond the end of the log ({wm[1]})")
        if start > end:
            if fail_on_data_loss or requested_start >= 0:
                raise OptionError(f"{tp[0]}[{tp[1]}]: starting offset {start} is after the ending offset {end}")
            start = end
        out.append(OffsetRange(tp[0], tp[1], start, end, requested_start == EARLIEST))
    return out


def split_ranges(
    ranges: Iterable[OffsetRange], *, max_records: int | None = None, min_partitions: int | None = None
) -> list[OffsetRange]:
    """Cut ranges so none holds more than ``max_records`` offsets and there are ``min_partitions`` at least.

    Empty ranges are dropped. Pieces of one partition stay contiguous; splitting for
    ``min_partitions`` halves the largest piece until there are enough, which keeps the pieces
    of a large partition about equal (each task pays for its own read-back, so many tiny
    pieces cost more than they parallelise).
    """
    pieces: list[OffsetRange] = []
    for rng in ranges:
        if rng.size == 0:
            continue
        if max_records is None or rng.size <= max_records:
            pieces.append(rng)
            continue
        count = -(-rng.size // max_records)
        step = -(-rng.size // count)
        start = rng.from_offset
        while start < rng.until_offset:
            end = min(rng.until_offset, start + step)
            pieces.append(
                OffsetRange(rng.topic, rng.partition, start, end, rng.from_earliest and start == rng.from_offset)
            )
            start = end
    if min_partitions is None or len(pieces) >= min_partitions:
        return _ordered(pieces)
    heap = [(-p.size, i, p) for i, p in enumerate(pieces)]
    heapq.heapify(heap)
    counter = len(pieces)
    while len(heap) < min_partitions and heap and -heap[0][0] >= 2:
        _, _, largest = heapq.heappop(heap)
        middle = largest.from_offset + largest.size // 2
        for part in (
            OffsetRange(largest.topic, largest.partition, largest.from_offset, middle, largest.from_earliest),
            OffsetRange(largest.topic, largest.partition, middle, largest.until_offset, False),
        ):
            heapq.heappush(heap, (-part.size, counter, part))
            counter += 1
    return _ordered([p for _, _, p in heap])


def _ordered(pieces: list[OffsetRange]) -> list[OffsetRange]:
    return sorted(pieces, key=lambda p: (p.topic, p.partition, p.from_offset))


def prorate(
    start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int], limit: int
) -> dict[TopicPartitionKey, int]:
    """Move at most ``limit`` offsets past ``start`` in total, shared in proportion to each backlog.

    Largest-remainder rounding makes the shares add up to exactly ``min(limit, backlog)``, so
    every trigger makes progress however many partitions share a small limit.
    """
    backlog = {tp: max(0, end[tp] - start.get(tp, end[tp])) for tp in end}
    total = sum(backlog.values())
    if total <= limit:
        return dict(end)
    shares: dict[TopicPartitionKey, int] = {}
    remainders: list[tuple[float, TopicPartitionKey]] = []
    for tp, size in backlog.items():
        exact = size * limit / total
        shares[tp] = int(exact)
        remainders.append((exact - int(exact), tp))
    left = limit - sum(shares.values())
    for _, tp in sorted(remainders, key=lambda r: (-r[0], r[1]))[:left]:
        shares[tp] += 1
    return {tp: start.get(tp, end[tp]) + min(backlog[tp], shares[tp]) for tp in end}


def offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offset shape, ``{"topic": {"0": 23}}``, in a stable order."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def offsets_from_json(data: Mapping[str, object] | None) -> dict[TopicPartitionKey, int]:
    out: dict[TopicPartitionKey, int] = {}
    for topic, partitions in (data or {}).items():
        if not isinstance(partitions, Mapping):
            raise ValueError(f"offset entry for topic {topic!r} is not an object: {partitions!r}")
        for partition, offset in partitions.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(f"offset of {topic}[{partition}] is not an integer: {offset!r}")
            out[(str(topic), int(partition))] = offset
    return out
