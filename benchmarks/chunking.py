"""Chunking throughput: HybridProducer / HybridConsumer beside raw confluent-kafka on the same records.

The baseline (the client ceiling) is a raw ``confluent_kafka.Producer`` sending segment records that
were built before the clock started, and a raw ``Consumer`` reading those same records without
reassembling them. Both sides run in this process against the same broker, alternating, so the
ratio compares our overhead and nothing else.

Default client settings on both sides (1 MB segments for ours); the same payloads; 9 repetitions.
A last pass reads one 25 MB chunked message in a fresh interpreter and reports the consumer's peak
RSS growth as a multiple of the message (1.0: the message itself, held once).

    python -m benchmarks.chunking [--backend kafka] [--quick] [--repeats N] [--mb N] [--sizes a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from benchmarks.common import Measure, PeakMemory, bench_kafka, malloc_mode, mbps, payload, save, stat
from gateway import HybridConsumer, HybridProducer
from gateway.protocol import split
from gateway.testing import KafkaService

SEGMENT = 1_000_000
"""``max.message.segment.bytes``: 1 MB segments (the producer caps each to fit ``message.max.bytes``)."""
HYBRID_PRODUCER_CONF = {"max.message.segment.bytes": SEGMENT}
"""Everything else at its default, for both clients: the ratio is what a user gets without tuning."""
MEMORY_MESSAGE = 25_000_000
"""The size of the one chunked message the memory pass reads (under the default 32 MB assembler buffer)."""


def segment_size() -> int:
    """The chunk size the hybrid producer uses for the benchmark's keys and headers (the raw side uses it too)."""
    from gateway.producer._config import parse_producer_config

    settings, _ = parse_producer_config({"bootstrap.servers": "unused:9092", **HYBRID_PRODUCER_CONF})
    return settings.segment_size_for(b"k0000", [("_t", b"\0" * 8)])


def produce_raw(kafka: KafkaService, topic: str, records: list[dict[str, Any]], total: int) -> int:
    producer = Producer(kafka.client_conf())
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
    producer = HybridProducer({**kafka.client_conf(), **HYBRID_PRODUCER_CONF})
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, key=f"k{i:04d}".encode(), partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return sum(len(v) for v in values)


CONSUMER_CONF = {"enable.auto.commit": False}


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
    seg = segment_size()
    results: dict[str, Any] = {"segment_bytes": seg, "sizes": {}}
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
                        f"k{i:04d}".encode(),
                        value,
                        seg,
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
        results["memory"] = memory(kafka, repeats)
        print(f"consumer peak growth / message: {results['memory']['growth_over_message']['median']:.2f}", flush=True)
    return results


def memory_child(bootstrap: str, topic: str, size: int) -> None:
    """In a fresh interpreter: the peak RSS growth of reading one chunked message, printed in bytes."""
    malloc_mode("lean")
    with PeakMemory() as mem:
        consumer = HybridConsumer(
            {"bootstrap.servers": bootstrap, **CONSUMER_CONF, "group.id": f"m-{uuid.uuid4().hex[:8]}"}
        )
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        msg = None
        while msg is None or msg.error() is not None:
            msg = consumer.poll(1.0)
        got = len(msg.value() or b"")
        del msg
        consumer.close()
    assert got == size, (got, size)
    print(json.dumps({"growth": mem.growth}))


def memory(kafka: KafkaService, repeats: int) -> dict[str, Any]:
    """Consumer peak growth over one :data:`MEMORY_MESSAGE` chunked message, as a multiple of the message."""
    topic = f"bench-mem-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=1)
    produce_hybrid(kafka, topic, [payload(MEMORY_MESSAGE, 0)])
    ratios = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--memory-child", kafka.bootstrap_servers, topic],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},  # this run's gateway
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        ratios.append(json.loads(out.stdout.strip().splitlines()[-1])["growth"] / MEMORY_MESSAGE)
    kafka.delete_topic(topic)
    return {"message_bytes": MEMORY_MESSAGE, "growth_over_message": stat(ratios)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="kafka", help="kafka (default), tansu, noida, mock, external")
    parser.add_argument("--quick", action="store_true", help="fewer bytes and repetitions")
    parser.add_argument("--repeats", type=int, default=0, help="repetitions (default 9, --quick 3)")
    parser.add_argument("--mb", type=int, default=0, help="MB moved per size and repetition (default 256, --quick 64)")
    parser.add_argument("--sizes", default="1000000,10000000", help="message sizes, comma-separated")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on the last line")
    parser.add_argument("--memory-child", nargs=2, metavar=("BOOTSTRAP", "TOPIC"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        bootstrap, topic = args.memory_child
        memory_child(bootstrap, topic, MEMORY_MESSAGE)
        return 0
    total = (args.mb or (64 if args.quick else 256)) * 1_000_000
    repeats = args.repeats or (3 if args.quick else 9)
    sizes = [int(size) for size in args.sizes.split(",")]
    results = run(args.backend, sizes, total, repeats)
    results["mode"] = "quick" if args.quick else "full"
    if args.json:
        print(json.dumps(results))
    else:
        print(f"saved {save('chunking', results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
