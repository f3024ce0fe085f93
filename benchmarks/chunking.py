"""Chunking throughput: HybridProducer / HybridConsumer beside raw confluent-kafka on the same records.

The baseline (the client ceiling) is a raw ``confluent_kafka.Producer`` sending segment records that
were built before the clock started, and a raw ``Consumer`` reading those same records without
reassembling them. Both sides run in this process against the same broker, alternating, so the
ratio compares our overhead and nothing else.

    python -m benchmarks.chunking [--backend kafka] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from benchmarks.common import Measure, bench_kafka, mbps, payload, save
from gateway import HybridConsumer, HybridProducer
from gateway.protocol import split
from gateway.testing import KafkaService

SEGMENT = 800_000
BUFFER_BYTES = 64_000_000
"""The hybrid consumer's buffer, and so the largest chunked message the hybrid producer may write."""
PRODUCER_CONF = {
    "message.max.bytes": 1_000_000,
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "acks": "all",
}


def produce_raw(kafka: KafkaService, topic: str, records: list[dict[str, Any]], total: int) -> int:
    producer = Producer({**kafka.client_conf(), **PRODUCER_CONF})
    for rec in records:
        while True:
            try:
                producer.produce(topic, **rec)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return total


def produce_hybrid(kafka: KafkaService, topic: str, values: list[bytes]) -> int:
    producer = HybridProducer(
        {
            **kafka.client_conf(),
            **PRODUCER_CONF,
            "max.message.segment.bytes": SEGMENT,
            "large.message.max.bytes": BUFFER_BYTES,  # what consume_hybrid's buffer holds
        }
    )
    for i, value in enumerate(values):
        producer.produce(topic, value, key=f"k{i}".encode(), partition=0)
    assert producer.flush(120) == 0
    return sum(len(v) for v in values)


CONSUMER_CONF = {
    "enable.auto.commit": False,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 10_485_760,
    "fetch.wait.max.ms": 10,
    "receive.message.max.bytes": 200_000_000,
}


def consume_raw(kafka: KafkaService, topic: str, records: int) -> int:
    consumer = Consumer({**kafka.client_conf(), **CONSUMER_CONF, "group.id": f"b-{uuid.uuid4().hex[:8]}"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen = moved = 0
    while seen < records:  # the fastest pattern the raw client offers: wait for one, then drain what is there
        first = consumer.poll(1.0)
        if first is None:
            continue
        for msg in [first, *consumer.consume(499, 0)]:
            if msg.error() is None:
                seen += 1
                moved += len(msg.value() or b"")
    consumer.close()
    return moved


def consume_hybrid(kafka: KafkaService, topic: str, messages: int) -> int:
    consumer = HybridConsumer(
        {
            **kafka.client_conf(),
            **CONSUMER_CONF,
            "group.id": f"b-{uuid.uuid4().hex[:8]}",
            "message.assembler.buffer.capacity": BUFFER_BYTES,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen = moved = 0
    while seen < messages:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            seen += 1
            moved += len(msg.value() or b"")
    consumer.close()
    return moved


def run(backend: str, sizes: list[int], total_bytes: int, repeats: int) -> dict[str, Any]:
    results: dict[str, Any] = {"segment_bytes": SEGMENT, "sizes": {}}
    with bench_kafka(backend) as kafka:
        results["backend"] = f"{kafka.name} {kafka.version}"
        print(f"backend: {results['backend']}")
        for size in sizes:
            count = max(3, total_bytes // size)
            values = [payload(size, i) for i in range(count)]
            names = ("raw_produce", "hybrid_produce", "raw_consume", "hybrid_consume")
            measures = {name: Measure(name) for name in names}
            for rep in range(repeats):
                topic_raw = f"bench-raw-{uuid.uuid4().hex[:8]}"
                topic_hyb = f"bench-hyb-{uuid.uuid4().hex[:8]}"
                for t in (topic_raw, topic_hyb):
                    kafka.create_topic(t, partitions=1)
                records = []
                for i, value in enumerate(values):
                    for r in split(
                        topic_raw,
                        0,
                        int(time.time() * 1000),
                        uuid.uuid4(),
                        f"k{i}".encode(),
                        value,
                        SEGMENT,
                        [("_t", b"\0" * 8)],
                    ):
                        records.append(
                            {
                                "value": bytes(r.value or b""),
                                "key": r.key,
                                "partition": 0,
                                "headers": r.headers,
                                "timestamp": r.timestamp or 0,
                            }
                        )
                moved = sum(len(v) for v in values)
                order = [("raw", topic_raw), ("hybrid", topic_hyb)]
                if rep % 2:
                    order.reverse()
                for kind, topic in order:
                    start = time.perf_counter()
                    if kind == "raw":
                        produce_raw(kafka, topic, records, moved)
                    else:
                        produce_hybrid(kafka, topic, values)
                    measures[f"{kind}_produce"].samples.append(mbps(time.perf_counter() - start, moved))
                for kind, topic in order:
                    start = time.perf_counter()
                    got = (
                        consume_raw(kafka, topic, len(records))
                        if kind == "raw"
                        else consume_hybrid(kafka, topic, count)
                    )
                    measures[f"{kind}_consume"].samples.append(mbps(time.perf_counter() - start, moved))
                    if kind == "hybrid":
                        assert got == moved, (got, moved)
                for t in (topic_raw, topic_hyb):
                    kafka.delete_topic(t)
            row: dict[str, Any] = {
                name: {"median_MBps": m.median, "min": m.spread[0], "max": m.spread[1], "samples": m.samples}
                for name, m in measures.items()
            }
            row["produce_ratio"] = measures["hybrid_produce"].median / measures["raw_produce"].median
            row["consume_ratio"] = measures["hybrid_consume"].median / measures["raw_consume"].median
            row["messages"] = count
            results["sizes"][str(size)] = row
            print(
                f"{size / 1e6:5.0f} MB x{count:3d}: produce hybrid {measures['hybrid_produce'].median:7.1f} "
                f"raw {measures['raw_produce'].median:7.1f} MB/s ratio {row['produce_ratio']:.2f} | "
                f"consume hybrid {measures['hybrid_consume'].median:7.1f} raw {measures['raw_consume'].median:7.1f} "
                f"MB/s ratio {row['consume_ratio']:.2f}",
                flush=True,
            )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="kafka", help="kafka (default), tansu, noida, mock, external")
    parser.add_argument("--quick", action="store_true", help="fewer bytes and repetitions")
    args = parser.parse_args(argv)
    total = 64_000_000 if args.quick else 256_000_000
    repeats = 3 if args.quick else 5
    results = run(args.backend, [1_000_000, 4_000_000, 16_000_000], total, repeats)
    results["mode"] = "quick" if args.quick else "full"
    print(f"saved {save('chunking', results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
