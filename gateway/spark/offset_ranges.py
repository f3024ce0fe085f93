"""The Kafka side of the source: partition discovery, watermarks and reading one offset range.

Everything uses ``assign`` on a plain confluent-kafka consumer: Spark decides which task reads
what, so there is no group to join and nothing to commit. A range read stops at the first
record at or past its end, or at end-of-partition once the log's end reaches the range's end
(the last offsets of a range may hold nothing visible: transaction markers, compacted records).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from gateway.librdkafka.refusals import ConnectionRefusals
from gateway.protocol.records import Record, TopicPartitionKey
from gateway.spark.options import SourceOptions
from gateway.spark.planning import DataLossError

log = logging.getLogger(__name__)

_METADATA_TIMEOUT = 30.0
_FETCH_BATCH = 500
# librdkafka's timestamp types (0 none, 1 create, 2 log append) -> Kafka's ids, as Spark shows them
_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}
_LOST = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})
_GONE = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC})


def open_consumer(options: SourceOptions) -> Any:
    """A consumer whose librdkafka log lines go through Python logging (``gateway.kafka``), not raw stderr.

    The logger is added here, in the process that opens the consumer (driver or executor), since a
    logger cannot travel inside Spark's options.
    """
    conf = options.consumer_config()
    conf.setdefault("logger", logging.getLogger("gateway.kafka"))
    refusals = ConnectionRefusals()
    consumer = _Consumer({**conf, "error_cb": refusals})
    consumer.refusals = refusals
    return consumer


class _Consumer(Consumer):
    """A consumer whose failed metadata request names the authentication failure librdkafka reported.

    Without it a Spark job given a wrong password fails planning with ``Broker transport failure``.
    Metadata is asked on the driver, by a consumer that holds no assignment, so the poll that serves
    the queued error reports takes no record.
    """

    refusals: ConnectionRefusals

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().list_topics(*args, **kwargs)
        except KafkaException as exc:
            raise self.refusals.explain(self, exc) from exc


def topic_partitions(consumer: Any, topics: Sequence[str], *, must_exist: bool = True) -> list[TopicPartitionKey]:
    """Every partition of ``topics``; a missing topic raises unless ``must_exist`` is false."""
    out: list[TopicPartitionKey] = []
    for topic in topics:
        meta = consumer.list_topics(topic, timeout=_METADATA_TIMEOUT).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            if must_exist:
                reason = "unknown" if meta is None or meta.error is None else meta.error
                raise DataLossError(f"topic {topic!r} cannot be read: {reason}")
            continue
        out.extend((topic, p) for p in sorted(meta.partitions))
    return out


def subscribed_partitions(consumer: Any, options: SourceOptions, *, must_exist: bool = True) -> list[TopicPartitionKey]:
    """The partitions ``options`` subscribe to: named topics, topics matching the pattern, or the assigned ones.

    A pattern matches whole names, as Spark's does, and never matches an internal topic (``__``).
    An assigned partition that does not exist raises unless ``must_exist`` is false.
    """
    sub = options.subscription
    if sub is None or sub.kind == "subscribe":
        return topic_partitions(consumer, options.topics, must_exist=must_exist)
    if sub.kind == "subscribePattern":
        assert sub.pattern is not None
        pattern = re.compile(sub.pattern)
        names = consumer.list_topics(timeout=_METADATA_TIMEOUT).topics
        matched = sorted(t for t in names if pattern.fullmatch(t) and not t.startswith("__"))
        return topic_partitions(consumer, matched, must_exist=False)
    existing = set(topic_partitions(consumer, sub.topics, must_exist=False))
    missing = [tp for tp in sub.partitions if tp not in existing]
    if missing and must_exist:
        raise DataLossError(f"assigned partitions {', '.join(f'{t}[{p}]' for t, p in missing)} do not exist")
    return [tp for tp in sub.partitions if tp in existing]


def offsets_for_times(consumer: Any, wanted: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
    """Per partition, the first offset whose record has a timestamp at or after the one asked; -1 when none has."""
    if not wanted:
        return {}
    asked = [TopicPartition(t, p, ts) for (t, p), ts in wanted.items()]
    found = consumer.offsets_for_times(asked, timeout=_METADATA_TIMEOUT)
    out: dict[TopicPartitionKey, int] = {}
    for tp in found:
        if tp.error is not None:
            raise DataLossError(f"offsets for times of {tp.topic}[{tp.partition}] failed: {tp.error}")
        out[(tp.topic, tp.partition)] = int(tp.offset) if tp.offset >= 0 else -1
    return out


def watermarks(
    consumer: Any, partitions: Iterable[TopicPartitionKey], *, method: str = "listOffsets"
) -> dict[TopicPartitionKey, tuple[int, int]]:
    """``(low, high)`` per partition from ListOffsets, or with the high end confirmed by a fetch.

    ``fetch`` exists for brokers whose ListOffsets answer is wrong (Tansu reports the last
    batch's base offset + 1): a fetch at that offset returns the last batch, and the fetch
    response carries the true high watermark.
    """
    out: dict[TopicPartitionKey, tuple[int, int]] = {}
    for topic, partition in partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=_METADATA_TIMEOUT)
        if method == "fetch" and high > low:
            high = _high_from_fetch(consumer, topic, partition, high - 1)
        out[(topic, partition)] = (int(low), int(high))
    return out


def _high_from_fetch(consumer: Any, topic: str, partition: int, offset: int) -> int:
    consumer.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + _METADATA_TIMEOUT
    try:
        while time.monotonic() < deadline:
            for msg in _fetch(consumer):
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    return int(msg.offset())
        raise TimeoutError(f"no end-of-partition for {topic}[{partition}] within {_METADATA_TIMEOUT:.0f}s")
    finally:
        consumer.unassign()


def _fetch(consumer: Any) -> list[Any]:
    """What librdkafka has now, waiting only for the first record.

    ``consume(n, timeout)`` waits the whole timeout unless ``n`` records arrive, which would
    make every short range cost the full timeout.
    """
    first = consumer.poll(0.5)
    if first is None:
        return []
    return [first, *consumer.consume(_FETCH_BATCH - 1, 0)]


def _raw(msg: Any) -> Record:
    kind, ts = msg.timestamp()
    ts_type = _TIMESTAMP_TYPES.get(kind, -1)
    return Record(
        msg.offset(),
        msg.key(),
        msg.value(),
        msg.headers(),
        ts_type,
        ts if ts_type >= 0 else None,
    )


def read_batches(
    consumer: Any,
    topic: str,
    partition: int,
    start: int,
    until: int,
    *,
    timeout_s: float,
    fail_on_data_loss: bool,
) -> Iterator[list[Record]]:
    """Records of ``[start, until)`` in offset order, in the batches librdkafka hands out.

    Lost data (the log now begins after the position, or ends before ``until``) raises
    :class:`DataLossError` when ``fail_on_data_loss``; otherwise the read skips to what is left.
    """
    consumer.assign([TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            batch: list[Record] = []
            done = False
            for msg in _fetch(consumer):
                err = msg.error()
                if err is not None:
                    code = err.code()
                    if code == KafkaError._PARTITION_EOF:
                        if msg.offset() >= until:
                            done = True
                            break
                        _lost(
                            f"{topic}[{partition}] ends at {msg.offset()}, before the range's end {until}",
                            fail_on_data_loss,
                        )
                        done = True
                        break
                    if code in _LOST:
                        low, _ = consumer.get_watermark_offsets(
                            TopicPartition(topic, partition), timeout=_METADATA_TIMEOUT
                        )
                        _lost(
                            f"{topic}[{partition}]: offsets before {low} were deleted while reading ({err.str()})",
                            fail_on_data_loss,
                        )
                        if low >= until:
                            done = True
                            break
                        consumer.assign([TopicPartition(topic, partition, low)])
                        break
                    if code in _GONE:
                        _lost(f"{topic}[{partition}] is gone: {err.str()}", fail_on_data_loss)
                        done = True
                        break
                    if err.fatal():
                        raise KafkaException(err)
                    log.warning("consumer error on %s[%d]: %s", topic, partition, err.str())
                    continue
                offset = msg.offset()
                if offset >= until:
                    done = True
                    break
                batch.append(_raw(msg))
                if offset >= until - 1:
                    done = True
                    break
            if batch:
                deadline = time.monotonic() + timeout_s
                yield batch
            if done:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no record of {topic}[{partition}] arrived for {timeout_s:.0f}s while reading up to {until}"
                    " (kafkaConsumer.pollTimeoutMs)"
                )
    finally:
        consumer.unassign()


def _lost(message: str, fail: bool) -> None:
    if fail:
        raise DataLossError(message + " (set failOnDataLoss=false to go on without it)")
    log.warning("%s; going on without it (failOnDataLoss=false)", message)
