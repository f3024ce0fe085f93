"""Chunked messaging end to end: HybridProducer splits, HybridConsumer reassembles (issue: chunking)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from gateway import (
    HybridConsumer,
    HybridProducer,
    LargeMessageDroppedError,
    LargeMessageSendError,
    OffsetNotTrackedError,
)
from gateway.protocol import LM_HEADER, decode_lm, split
from gateway.protocol.headers import last_header
from gateway.testing import KafkaService
from gateway.testing.embedded import EmbeddedKafka
from tests.golden import hx, load_vectors
from tests.helpers import payload, sha
from tests.kafkautil import produce_records


def drain(consumer: HybridConsumer, want: int, timeout: float = 60, *, errors: list[Any] | None = None) -> list[Any]:
    """Poll until ``want`` messages arrived (or the timeout); typed errors go to ``errors`` when given."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        try:
            msg = consumer.poll(0.5)
        except Exception as exc:
            if errors is None:
                raise
            errors.append(exc)
            continue
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(str(msg.error()))
        out.append(msg)
    return out


def raw_segments(
    topic: str, value: bytes, segment: int, *, partition: int = 0, key: bytes | None = b"k", header_only: bool = False
) -> list[dict[str, Any]]:
    # a recent timestamp: a broker that applies retention.ms to record times would drop an old one
    records = split(
        topic, partition, int(time.time() * 1000), uuid.uuid4(), key, value, segment, [], header_only=header_only
    )
    return [
        {
            "topic": r.topic,
            "partition": partition,
            "key": r.key,
            "value": bytes(r.value or b""),
            "headers": r.headers,
            "timestamp": r.timestamp,
        }
        for r in records
    ]


def plain_record(topic: str, i: int, partition: int = 0) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "key": f"p{i}".encode(), "value": f"plain-{i}".encode()}


# ---------------------------------------------------------------------------------------------
def test_round_trip_mixed_sizes_and_delivery_reports(kafka: KafkaService, topic: str, consumer_config: Any) -> None:
    producer = HybridProducer({**kafka.producer_config(), "max.message.segment.bytes": 300_000})
    sizes = [10, 300_000, 300_001, 1_000_000, 0, 2_500_000]
    reports: list[tuple[Any, Any]] = []
    for i, size in enumerate(sizes):
        producer.produce(
            topic, payload(size, i), key=f"m{i}".encode(), on_delivery=lambda err, msg: reports.append((err, msg))
        )
    assert producer.flush(30) == 0 and len(producer) == 0
    assert len(reports) == len(sizes), "exactly one delivery report per logical message"
    assert all(err is None for err, _ in reports)
    assert [msg.value() for _, msg in reports] == [payload(s, i) for i, s in enumerate(sizes)]
    consumer = HybridConsumer(consumer_config())
    consumer.subscribe([topic])
    got = drain(consumer, len(sizes))
    consumer.close()
    assert [m.value() for m in got] == [payload(s, i) for i, s in enumerate(sizes)]
    assert [m.key() for m in got] == [f"m{i}".encode() for i in range(len(sizes))]
    # the delivered offset is the one that completed the message, as in the delivery report
    assert [m.offset() for m in got] == [msg.offset() for _, msg in reports]
    big = got[-1]
    lm = decode_lm(last_header(big.headers(), LM_HEADER))
    assert (lm.type, lm.segment_number, lm.number_of_segments, lm.message_size) == (1, -1, 9, 2_500_000)
    assert last_header(big.headers(), "_t") is not None


def test_failed_send_reports_once_with_typed_error() -> None:
    with EmbeddedKafka() as cluster:
        cluster.create_topic("down", partitions=1)
        producer = HybridProducer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "message.timeout.ms": 2000,
                "max.message.segment.bytes": 100_000,
            }
        )
        producer.list_topics("down", timeout=10)
        for broker in cluster.broker_ids:
            cluster.set_broker_down(broker)
        reports: list[Any] = []
        producer.produce("down", payload(450_000), key=b"k", on_delivery=lambda err, msg: reports.append((err, msg)))
        producer.flush(20)
        assert len(reports) == 1, "one report for the logical message, not one per segment"
        err, msg = reports[0]
        assert isinstance(err, KafkaError) and "Sent 0 of 5 segments" in err.str()
        assert err.code() == KafkaError._MSG_TIMED_OUT and err.retriable() == err.cause.retriable()
        assert isinstance(err.cause, LargeMessageSendError) and err.cause.sent == 0 and err.cause.total == 5
        assert msg.value() == payload(450_000) and msg.key() == b"k"
        # len() also counts librdkafka's queued error events, and with every broker down a fresh
        # "connection refused" event can arrive just after flush: serve them until none is left.
        # A logical message still counted in flight would keep this above zero to the deadline.
        deadline = time.monotonic() + 10
        while len(producer) and time.monotonic() < deadline:
            producer.poll(0.05)
        assert len(producer) == 0
        del producer


def test_unknown_partition_fails_the_whole_message(kafka: KafkaService, topic: str) -> None:
    producer = HybridProducer(
        {**kafka.producer_config(), "max.message.segment.bytes": 100_000, "message.timeout.ms": 3000}
    )
    reports: list[Any] = []
    try:  # synchronously once librdkafka knows the topic has one partition, else in the delivery report
        producer.produce(topic, payload(450_000), key=b"k", partition=7, on_delivery=lambda e, m: reports.append(e))
    except LargeMessageSendError as exc:  # metadata arrived while the segments were being queued
        assert exc.code() == KafkaError._UNKNOWN_PARTITION and 0 < exc.sent < exc.total == 5
    except KafkaException as exc:  # refused before any segment was queued (checked second: the one above is one too)
        assert exc.args[0].code() == KafkaError._UNKNOWN_PARTITION
    else:
        producer.flush(20)
        assert len(reports) == 1 and reports[0].code() == KafkaError._UNKNOWN_PARTITION
    producer.flush(20)
    assert reports == [] or len(reports) == 1, "never more than one report per logical message"
    assert len(producer) == 0


@pytest.mark.requires("retention")
def test_two_producers_interleave_fifty_large_messages(kafka: KafkaService, consumer_config: Any) -> None:
    topic = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(topic, partitions=1)
    rng = random.Random(5)
    sizes = [rng.randint(1_000_000, 5_000_000) for _ in range(50)]
    conf = {
        **kafka.producer_config(),
        "max.message.segment.bytes": 250_000,
        "linger.ms": 0,
        "batch.size": 300_000,
        "partitioner": "murmur2_random",
    }

    def run(worker: int) -> None:
        producer = HybridProducer(conf)
        for i in range(worker, 50, 2):
            producer.produce(topic, payload(sizes[i], i), key=f"m{i}".encode(), partition=0)
            producer.produce(topic, f"plain-{i}".encode(), key=f"p{i}".encode(), partition=0)
            producer.poll(0)
        assert producer.flush(120) == 0

    threads = [threading.Thread(target=run, args=(w,)) for w in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    consumer = HybridConsumer(consumer_config(**{"message.assembler.buffer.capacity": 64_000_000}))
    consumer.subscribe([topic])
    got = drain(consumer, 100, timeout=120)
    assert consumer.poll(1.0) is None
    consumer.close()
    by_key = Counter(m.key() for m in got)
    assert all(v == 1 for v in by_key.values()), "no message twice"
    assert len(got) == 100
    for m in got:
        i = int(m.key()[1:])
        expected = payload(sizes[i], i) if m.key().startswith(b"m") else f"plain-{i}".encode()
        assert sha(m.value()) == sha(expected)
    # the producers really interleaved: messages were delivered while another one was still pending,
    # which is exactly when LinkedIn's consumer adds a _so (safe offset) header
    assert sum(1 for m in got if last_header(m.headers(), "_so") is not None) >= 10


def test_memory_cap_with_twenty_interleaved_incomplete_messages(kafka: KafkaService, consumer_config: Any) -> None:
    topic = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(topic, partitions=4)  # ~3.4 MB per partition: inside the mock's 5 MiB window
    records: list[dict[str, Any]] = []
    pending = [raw_segments(topic, payload(1_000_000, i), 340_000, partition=i % 4) for i in range(20)]
    for seq in range(2):  # the first two of three segments of every message, interleaved; the third never comes
        for parts in pending:
            records.append(parts[seq])
    records += [plain_record(topic, 900 + p, partition=p) for p in range(4)]
    produce_records(kafka.producer_config(), records)
    consumer = HybridConsumer(
        consumer_config(
            **{
                "message.assembler.buffer.capacity": 8_000_000,
                "exception.on.message.dropped": True,
                "message.assembler.max.message.bytes": 2_000_000,
                # partitions paused for room wait this long for a message that cannot finish
                "message.assembler.stall.timeout.ms": 300,
            }
        )
    )
    consumer.subscribe([topic])
    errors: list[Any] = []
    peak = 0
    got: list[Any] = []
    deadline = time.monotonic() + 90
    while (len(got) < 4 or len(errors) < 9) and time.monotonic() < deadline:
        try:
            msg = consumer.poll(0.5)
        except LargeMessageDroppedError as exc:
            errors.append(exc)
            msg = None
        peak = max(peak, consumer.metrics()["assembler.buffered.bytes"])
        if msg is not None and msg.error() is None:
            got.append(msg)
    metrics = consumer.metrics()
    consumer.close()
    assert sorted(m.value() for m in got) == [f"plain-{900 + p}".encode() for p in range(4)]
    assert 0 < peak <= 8_000_000
    # 40 segments of 340 000 bytes = 13.6 MB offered, at most 8 MB kept: 5.6 MB must go, at most
    # 680 000 bytes per evicted message, so at least 9 evictions, each one reported as an error
    assert len(errors) == metrics["dropped.evicted"] >= 9
    assert metrics["assembler.buffered.bytes"] <= 8_000_000
    # each names what it dropped; one raised while a record was processed also carries that record
    assert all(e.dropped.topic == topic and e.dropped.number_of_segments == 3 for e in errors)
    assert all(isinstance(e.kafka_message.value(), bytes) for e in errors if e.kafka_message is not None)


def test_expired_partial_message_frees_memory_and_commit_moves_past(
    kafka: KafkaService, topic: str, consumer_config: Any
) -> None:
    partial = raw_segments(topic, payload(500_000), 100_000)[:2]  # the producer "died" after 2 of 5
    records = [plain_record(topic, 0), *partial] + [plain_record(topic, i) for i in range(1, 30)]
    produce_records(kafka.producer_config(), records)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = HybridConsumer(
        consumer_config(group, **{"message.assembler.expiration.offset.gap": 10, "enable.auto.commit": False})
    )
    consumer.subscribe([topic])
    got = drain(consumer, 30)
    assert len(got) == 30
    assert consumer.metrics()["assembler.buffered.bytes"] == 0
    assert consumer.metrics()["dropped.expired"] == 1
    committed = consumer.commit(asynchronous=False)
    raw = consumer.committed_safe_offsets([TopicPartition(topic, 0)], timeout=10)
    consumer.close()
    assert committed is not None and committed[0].offset == 32
    assert raw[0].offset == 32, "the safe offset moved past the abandoned segments at 1 and 2"


def test_safe_offset_commit_while_message_pending_then_resume(
    kafka: KafkaService, topic: str, consumer_config: Any
) -> None:
    big = raw_segments(topic, payload(600_000), 200_000)  # offsets 1, 3, 5
    records = [
        plain_record(topic, 0),
        big[0],
        plain_record(topic, 2),
        big[1],
        plain_record(topic, 4),
        big[2],
        plain_record(topic, 6),
    ]
    produce_records(kafka.producer_config(), records)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = HybridConsumer(consumer_config(group, **{"enable.auto.commit": False}))
    first.subscribe([topic])
    got = drain(first, 3)  # plain 0, 2, 4 while the large message is pending
    assert [m.value() for m in got] == [b"plain-0", b"plain-2", b"plain-4"]
    assert got[1].headers() == [("_so", (1).to_bytes(8, "big"))]
    assert first.safe_offset(TopicPartition(topic, 0)) == 1
    view = first.commit(asynchronous=False)
    assert view is not None and view[0].offset == 5  # the user-visible offset: next after 4
    assert first.committed_safe_offsets([TopicPartition(topic, 0)], timeout=10)[0].offset == 1
    assert first.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 5
    first.close()
    second = HybridConsumer(consumer_config(group, **{"enable.auto.commit": False}))
    second.subscribe([topic])
    rest = drain(second, 2)
    second.close()
    assert [m.offset() for m in rest] == [5, 6]
    assert rest[0].value() == payload(600_000)


def test_seek_back_into_large_message_and_below_tracked_range(
    kafka: KafkaService, topic: str, consumer_config: Any
) -> None:
    big = raw_segments(topic, payload(600_000), 200_000)
    records = [
        big[0],
        *(plain_record(topic, i) for i in range(1, 7)),
        big[1],
        big[2],
        *(plain_record(topic, i) for i in range(9, 12)),
    ]
    produce_records(kafka.producer_config(), records)
    consumer = HybridConsumer(consumer_config(**{"max.tracked.messages.per.partition": 4, "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = drain(consumer, 10)
    assert [m.offset() for m in got] == [1, 2, 3, 4, 5, 6, 8, 9, 10, 11]
    assert got[6].value() == payload(600_000)
    consumer.seek(TopicPartition(topic, 0, 8))  # back into the large message delivered at 8
    again = drain(consumer, 4)
    assert [m.offset() for m in again] == [8, 9, 10, 11], "re-read from its first segment, nothing before it again"
    assert again[0].value() == payload(600_000)
    # the plain records 1..6 were delivered while the message was pending, so each has its own entry;
    # with 4 entries kept, the tracked range now starts above offset 2
    with pytest.raises(OffsetNotTrackedError):
        consumer.seek(TopicPartition(topic, 0, 2))
    consumer.close()


def test_linkedin_splitter_vectors_come_out_identical(kafka: KafkaService, topic: str, consumer_config: Any) -> None:
    cases = [c for c in load_vectors()["splitter"] if "exception" not in c and c["input"]["value_hex"]]
    records: list[dict[str, Any]] = []
    expected: list[tuple[bytes, list[tuple[str, bytes | None]]]] = []
    for case in cases:
        for rec in case["records"]:
            records.append(
                {
                    "topic": topic,
                    "partition": 0,
                    "key": hx(rec["key_hex"]),
                    "value": hx(rec["value_hex"]),
                    "headers": [(h["key"], hx(h["value_hex"])) for h in rec["headers"]],
                    "timestamp": int(time.time() * 1000),
                }
            )  # LinkedIn's 2020 time would be past retention
        last = case["records"][-1]
        headers = [(h["key"], hx(h["value_hex"])) for h in last["headers"]]
        lm = decode_lm(headers[-1][1])
        from gateway.protocol import delivered_lm, encode_lm

        rewritten = [*headers[:-1], ("_lm", encode_lm(delivered_lm(lm)))]
        expected.append((hx(case["input"]["value_hex"]) or b"", rewritten))
    produce_records(kafka.producer_config(), records)
    consumer = HybridConsumer(consumer_config())
    consumer.subscribe([topic])
    got = drain(consumer, len(cases))
    consumer.close()
    assert len(got) == len(cases) >= 8
    for msg, (value, headers) in zip(got, expected, strict=True):
        assert msg.value() == value
        assert msg.headers() == headers


def test_assign_at_an_offset_delivers_from_there_and_commits_without_null_metadata(
    kafka: KafkaService, topic: str, consumer_config: Any
) -> None:
    produce_records(kafka.producer_config(), [plain_record(topic, i) for i in range(8)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = HybridConsumer(consumer_config(group, **{"enable.auto.commit": False}))
    first.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = drain(first, 6)
    first.commit(message=got[-1], asynchronous=False)  # user offset 6, no metadata
    committed = first.committed([TopicPartition(topic, 0)], timeout=10)[0]
    assert (committed.offset, committed.metadata) == (6, "")
    first.close()
    second = HybridConsumer(consumer_config(group, **{"enable.auto.commit": False}))
    second.assign([TopicPartition(topic, 0, 2)])  # an explicit offset below the committed HW: a seek
    again = drain(second, 6)
    second.close()
    assert [m.offset() for m in again] == [2, 3, 4, 5, 6, 7]


def test_consume_batches_and_keeps_a_mid_batch_error_for_the_next_call(
    kafka: KafkaService, topic: str, consumer_config: Any
) -> None:
    from gateway import InvalidSegmentError
    from gateway.protocol import LargeMessageHeader, encode_lm

    bad = encode_lm(LargeMessageHeader(2, uuid.uuid4(), 5, 2, 100))  # H3 header with seq >= count
    records = [plain_record(topic, i) for i in range(3)]
    records += raw_segments(topic, payload(300_000), 100_000)
    records.append({"topic": topic, "partition": 0, "value": b"chunk", "headers": [("_lm", bad)]})
    records += [plain_record(topic, i) for i in range(10, 12)]
    produce_records(kafka.producer_config(), records)
    consumer = HybridConsumer(consumer_config(**{"enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    first: list[Any] = []
    deadline = time.monotonic() + 30
    while len(first) < 4 and time.monotonic() < deadline:
        first += consumer.consume(100, 1.0)
    assert [m.value() for m in first] == [b"plain-0", b"plain-1", b"plain-2", payload(300_000)]
    with pytest.raises(InvalidSegmentError) as info:
        consumer.consume(100, 5.0)
    assert info.value.kafka_message.offset() == 6
    rest = consumer.consume(100, 5.0)
    assert [m.value() for m in rest] == [b"plain-10", b"plain-11"]
    consumer.close()


def test_header_only_segments_from_the_producer(kafka: KafkaService, topic: str, consumer_config: Any) -> None:
    producer = HybridProducer(
        {**kafka.producer_config(), "li.record.header.enable": True, "max.message.segment.bytes": 200_000}
    )
    value = payload(700_000, 9)
    producer.produce(topic, value, key=None)
    assert producer.flush(30) == 0
    from tests.kafkautil import read_partition

    raw = read_partition(consumer_config(), topic, 0, 4)
    assert [decode_lm(last_header(m.headers(), LM_HEADER)).type for m in raw] == [2, 2, 2, 2]
    assert b"".join(m.value() for m in raw) == value, "H3 values are the raw chunks"
    assert len({m.key() for m in raw}) == 1 and len(raw[0].key()) == 16, "one UUID key for every segment"
    consumer = HybridConsumer(consumer_config())
    consumer.subscribe([topic])
    got = drain(consumer, 1)
    consumer.close()
    assert got[0].value() == value and got[0].offset() == raw[-1].offset()
