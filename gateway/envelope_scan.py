"""Reading a topic from its start to the end offsets captured first, looking for envelopes.

This is the I/O half of ``gateway gc``'s verification (the decisions are in :mod:`gateway.payload_gc`).
The read must either reach every partition's end or say that it did not: ``gc`` deletes a payload
when the read found no envelope for it, so a read that quietly stopped early, or a topic whose
metadata came back with an error and was taken for empty, would delete live data. Hence every
metadata, partition and fetch error ends the read as incomplete, and so does the deadline.

The read is ``read_uncommitted``: an envelope of an open transaction may still commit, and one of
an aborted transaction is still seen by ``read_uncommitted`` consumers, so both keep their payload.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.payload_gc import EnvelopeMatcher, Pending, ScanProgress, TopicScan

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
) -> TopicScan:
    """Read ``topic`` up to the high watermarks taken at the start, matching envelopes against ``wanted``."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            **client_config,
            "group.id": f"gateway-gc-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_uncommitted",
            "auto.offset.reset": "error",
            "allow.auto.create.topics": False,
        }
    )
    started = clock()
    wait = max(1.0, min(timeout_s, 60.0))  # per metadata request; the deadline bounds the whole read
    try:
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
        return _read(consumer, topic, wanted, starts, ends, deadline=started + timeout_s, clock=clock)
    finally:
        consumer.close()


def _read(
    consumer: Any,
    topic: str,
    wanted: Sequence[Pending],
    starts: Mapping[int, int],
    ends: Mapping[int, int],
    *,
    deadline: float,
    clock: Callable[[], float],
) -> TopicScan:
    from confluent_kafka import KafkaError, TopicPartition

    matcher = EnvelopeMatcher(wanted)
    progress = ScanProgress(ends)
    for p, low in starts.items():
        progress.advance(p, low)
    todo = [TopicPartition(topic, p, starts[p]) for p, _, _ in progress.lagging()]
    if not todo:
        return TopicScan.finished(topic, matcher, progress)
    consumer.assign(todo)
    while not progress.complete:
        if clock() >= deadline:
            return TopicScan.finished(topic, matcher, progress, "the scan deadline passed")
        first = consumer.poll(0.5)
        if first is None:
            continue
        for msg in [first, *consumer.consume(_BATCH - 1, 0)]:
            error = msg.error()
            if error is None:
                matcher.observe(msg.value(), msg.headers())
                progress.advance(msg.partition(), msg.offset() + 1)
            elif error.code() == KafkaError._PARTITION_EOF:
                progress.advance(msg.partition(), msg.offset())
            else:
                return TopicScan.finished(topic, matcher, progress, f"read error: {error}")
    log.debug(
        "topic %s read to %s: %d envelopes, %d undecodable", topic, dict(ends), matcher.envelopes, matcher.undecodable
    )
    return TopicScan.finished(topic, matcher, progress)
