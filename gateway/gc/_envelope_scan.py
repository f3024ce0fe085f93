"""Reading a topic from its start to the end offsets captured first, looking for envelopes.

This is the I/O half of ``gateway gc``'s verification (the decisions are in :mod:`gateway.gc.sweeper`).
The read must either reach every partition's end or say that it did not: ``gc`` deletes a payload
when the read found no envelope for it, so a read that quietly stopped early, or a topic whose
metadata came back with an error and was taken for empty, would delete live data. Hence every
metadata, partition and fetch error ends the read as incomplete, and so does the deadline.

The first read is ``read_uncommitted``: it sees every envelope, of open and aborted transactions
too, and notes where each one pointing at a pending write lies. A second, ``read_committed``, read
then goes over just those offsets (from the first to the last, per partition): what it returns is
committed, what it steps over is aborted. It never reads past a partition's last stable offset,
where a ``read_committed`` fetch would wait for the open transaction: envelopes there stay
undecided, and so do their payloads (see :class:`gateway.gc.sweeper.CommittedRead`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.gc.progress import Progress, ProgressObserver, ignore
from gateway.gc.verdicts import CommittedRead, EnvelopeMatcher, Pending, ScanProgress, TopicScan, committed_ranges

log = logging.getLogger(__name__)

_BATCH = 500


def partition_problems(topic: str, meta: Any) -> str | None:
    """Why ``meta`` (a confluent-kafka ``TopicMetadata`` or ``None``) does not describe a readable topic."""
    if meta is None:
        return f"topic {topic} is missing from the cluster metadata"
    if meta.error is not None:
        return f"metadata of topic {topic} carries an error: {meta.error}"
    if not meta.partitions:
        return f"metadata of topic {topic} lists no partitions"
    for p, pm in sorted(meta.partitions.items()):
        if pm.error is not None:
            return f"metadata of {topic}[{p}] carries an error: {pm.error}"
        if pm.leader < 0:
            return f"{topic}[{p}] has no leader"
    return None


def scan_topic(
    client_config: Mapping[str, Any],
    topic: str,
    wanted: Sequence[Pending],
    *,
    timeout_s: float = 600.0,
    clock: Callable[[], float] = time.monotonic,
    on_progress: ProgressObserver = ignore,
) -> TopicScan:
    """Read ``topic`` up to the high watermarks taken at the start, matching envelopes against ``wanted``,
    then ``read_committed`` over the envelopes found; ``timeout_s`` bounds both reads together.
    ``on_progress`` hears the records read after every batch of each read."""
    deadline = clock() + timeout_s
    wait = max(1.0, min(timeout_s, 60.0))  # per metadata request; the deadline bounds the whole read
    consumer = _consumer(client_config, "read_uncommitted")
    try:
        scan = _scan(consumer, topic, wanted, wait=wait, deadline=deadline, clock=clock, on_progress=on_progress)
    finally:
        consumer.close()
    return settle(client_config, scan, deadline=deadline, wait=wait, clock=clock, on_progress=on_progress)


def settle(
    client_config: Mapping[str, Any],
    scan: TopicScan,
    *,
    deadline: float,
    wait: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
    on_progress: ProgressObserver = ignore,
) -> TopicScan:
    """``scan`` with the ``read_committed`` read over its sightings, which tells committed from aborted.

    The second half of :func:`scan_topic`, apart so that a caller whose own complete read found the
    sightings (``gateway reconcile``'s Spark scan) gets the same proof rather than a second one.
    """
    if not scan.sightings:
        return scan  # nothing points at any wanted write: nothing to tell committed from aborted
    if clock() >= deadline:
        return scan.settled_by(CommittedRead.failed("the scan deadline passed before the read_committed read"))
    consumer = _consumer(client_config, "read_committed")
    try:
        committed = _read_committed(
            consumer, scan.topic, scan, wait=wait, deadline=deadline, clock=clock, on_progress=on_progress
        )
    finally:
        consumer.close()
    return scan.settled_by(committed)


def _consumer(client_config: Mapping[str, Any], isolation: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            **client_config,
            "group.id": f"gateway-gc-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "auto.offset.reset": "error",
            "allow.auto.create.topics": False,
        }
    )


def _scan(
    consumer: Any,
    topic: str,
    wanted: Sequence[Pending],
    *,
    wait: float,
    deadline: float,
    clock: Callable[[], float],
    on_progress: ProgressObserver,
) -> TopicScan:
    """The ``read_uncommitted`` read, from each partition's start to the high watermark taken first."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        meta = consumer.list_topics(topic, timeout=wait).topics.get(topic)
    except KafkaException as exc:
        return TopicScan.failed(topic, f"metadata of topic {topic} could not be read: {exc}")
    problem = partition_problems(topic, meta)
    if problem is not None:
        return TopicScan.failed(topic, problem)
    ends: dict[int, int] = {}
    starts: dict[int, int] = {}
    for p in sorted(meta.partitions):
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=wait, cached=False)
        except KafkaException as exc:
            return TopicScan.failed(topic, f"offsets of {topic}[{p}] could not be read: {exc}")
        if low < 0 or high < low:
            return TopicScan.failed(topic, f"offsets of {topic}[{p}] came back invalid: low {low}, high {high}")
        ends[p], starts[p] = int(high), int(low)
    matcher = EnvelopeMatcher(wanted)
    progress = ScanProgress(ends)
    tell = _teller(on_progress, "scan", topic, starts, ends)
    why = _read(consumer, topic, starts, matcher, progress, deadline=deadline, clock=clock, tell=tell)
    log.debug(
        "topic %s read to %s: %d envelopes, %d undecodable", topic, dict(ends), matcher.envelopes, matcher.undecodable
    )
    return TopicScan.finished(topic, matcher, progress, why)


def _read_committed(
    consumer: Any,
    topic: str,
    scan: TopicScan,
    *,
    wait: float,
    deadline: float,
    clock: Callable[[], float],
    on_progress: ProgressObserver,
) -> CommittedRead:
    """The ``read_committed`` read over the offsets where ``scan`` saw envelopes of the wanted writes.

    A ``read_committed`` consumer's high watermark is the last stable offset, and its fetches stop there.
    """
    from confluent_kafka import KafkaException, TopicPartition

    sightings = [s for where in scan.sightings.values() for s in where]
    lows: dict[int, int] = {}
    stable: dict[int, int] = {}
    for p in sorted({partition for partition, _ in sightings}):
        try:
            low, lso = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=wait, cached=False)
        except KafkaException as exc:
            return CommittedRead.failed(f"read_committed offsets of {topic}[{p}] could not be read: {exc}")
        if low < 0 or lso < low:
            return CommittedRead.failed(f"read_committed offsets of {topic}[{p}] came back invalid: {low}, {lso}")
        lows[p], stable[p] = int(low), int(lso)
    ranges = committed_ranges(sightings, lows, stable)
    matcher = EnvelopeMatcher(scan.sightings)
    progress = ScanProgress({p: end for p, (_, end) in ranges.items()})
    starts = {p: start for p, (start, _) in ranges.items()}
    tell = _teller(on_progress, "committed read", topic, starts, progress.ends)
    why = _read(consumer, topic, starts, matcher, progress, deadline, clock, tell)
    return CommittedRead.finished(topic, matcher, progress, ranges, stable, why)


def _read(
    consumer: Any,
    topic: str,
    starts: Mapping[int, int],
    matcher: EnvelopeMatcher,
    progress: ScanProgress,
    deadline: float,
    clock: Callable[[], float],
    tell: Callable[[int], None],
) -> str:
    """Feed ``matcher`` from ``starts`` until ``progress`` is complete; why it stopped short, or ``""``.

    ``tell`` hears the count of records read so far after every batch (and every empty poll)."""
    from confluent_kafka import KafkaError, TopicPartition

    for p, low in starts.items():
        progress.advance(p, low)
    todo = [TopicPartition(topic, p, starts[p]) for p, _, _ in progress.lagging()]
    if not todo:
        return ""
    consumer.assign(todo)
    read = 0
    tell(read)
    while not progress.complete:
        if clock() >= deadline:
            return "the scan deadline passed"
        first = consumer.poll(0.5)
        if first is None:
            tell(read)
            continue
        batch = [first, *consumer.consume(_BATCH - 1, 0)]
        read += len(batch)
        tell(read)
        for msg in batch:
            error = msg.error()
            if error is None:
                matcher.observe(msg.value(), msg.headers(), msg.partition(), msg.offset())
                progress.advance(msg.partition(), msg.offset() + 1)
            elif error.code() == KafkaError._PARTITION_EOF:
                progress.advance(msg.partition(), msg.offset())
            else:
                return f"read error: {error}"
    return ""


def _teller(
    on_progress: ProgressObserver, phase: str, topic: str, starts: Mapping[int, int], ends: Mapping[int, int]
) -> Callable[[int], None]:
    """``on_progress`` bound to one read: the records it has to go through are known from its offsets."""
    total = sum(max(0, end - starts.get(p, 0)) for p, end in ends.items())

    def tell(read: int) -> None:
        on_progress(Progress(phase, topic, min(read, total), total))

    return tell
