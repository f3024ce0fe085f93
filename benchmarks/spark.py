"""Spark: ``hybrid-kafka`` beside Spark's own Kafka source, on the same topics, in one run.

Four cases, each its own four-partition topic: one 100-byte record per partition (what a query
costs whatever it reads), 300 000 plain records of 100 bytes, 150 plain records of 1 MB and 16
messages of 10 MB on the chunked route. For plain records the two sources return the same rows; for
chunked messages Spark's source returns the raw LinkedIn segments (about 13 records of 800 KB
per message, with the segment header in the value), ``hybrid-kafka`` the whole messages.

For each master (``local[1]``, then ``local[2]``) one SparkSession with Spark's connector on it
(``spark.jars``, from ``make spark-kafka``) reads every case: one untimed read per source warms the
JVM, the Python workers and the connections up, then the two sources alternate, the order swapping
each repetition. Every timed read aggregates ``count(*)`` and ``sum(length(value))``, so every row
and every value byte is really produced. Both sources run with their defaults.

Rows/s counts the rows a source returns (segments for Spark's source on the chunked case); MB/s
counts the value bytes it returns (10^6 B/s); the ratio ``hybrid-kafka / kafka`` is computed per
repetition on payload bytes per second (the same payload for both, so it is a ratio of time) and
reported as its median and min-max.

    python -m benchmarks.spark [--backend kafka|tansu|noida|mock|external] [--repeats 5] [--scale 1.0]

A backend whose capabilities lack ``java_clients`` (the librdkafka mock) cannot serve Spark's source:
only ``hybrid-kafka`` is measured there. Against Tansu ``hybrid-kafka`` is told to confirm end
offsets with a fetch (``highWatermarkFrom=fetch``), since Tansu's ListOffsets answer is wrong.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.common import payload, save, stat
from gateway import HybridProducer
from gateway.testing import KafkaService, spark_kafka_conf, spark_kafka_jars, start_kafka

PARTITIONS = 4
MASTERS = ("local[1]", "local[2]")
OURS, SPARKS = "hybrid-kafka", "kafka"
SHARED_MACHINE_NOTE = (
    "the machine was shared with other engineers' test runs while this ran: absolute figures "
    "wander, ratios measured side by side in one session hold better"
)


@dataclass(frozen=True)
class Case:
    name: str
    label: str
    size: int
    count: int
    route: str  # "plain" | "chunked"


def cases(scale: float) -> list[Case]:
    def n(count: int) -> int:
        return max(PARTITIONS, int(count * scale))

    return [
        # one record per partition: what a query costs whatever it reads (planning, tasks, consumers)
        Case("fixed-cost", "one 100 B record per partition", 100, PARTITIONS, "plain"),
        Case("plain-100B", "100 B plain records", 100, n(300_000), "plain"),
        Case("plain-1MB", "1 MB plain records", 1_000_000, n(150), "plain"),
        Case("chunked-10MB", "10 MB messages, chunked", 10_000_000, n(16), "chunked"),
    ]


@dataclass
class Produced:
    topic: str
    messages: int
    payload_bytes: int
    records: int  # Kafka records: segments count one each


def produce_case(kafka: KafkaService, case: Case) -> Produced:
    topic = f"bench-spark-{case.name.lower()}-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    # a 1 MB value plus its record overhead is above librdkafka's default limit, below the broker's 1 048 588
    producer = HybridProducer(
        {
            **kafka.producer_config(),
            "message.max.bytes": 1_048_576,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    # a few distinct values, at most ~32 MB of them in memory
    values = [payload(case.size, seed) for seed in range(max(1, min(case.count, 8, 32_000_000 // case.size)))]
    for i in range(case.count):
        while True:
            try:
                producer.produce(topic, values[i % len(values)], f"k{i}".encode(), i % PARTITIONS, route=case.route)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(300) == 0
    return Produced(topic, case.count, case.count * case.size, _records(kafka, topic))


def _records(kafka: KafkaService, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(kafka.consumer_config())
    try:
        marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in range(PARTITIONS)]
    finally:
        consumer.close()
    return sum(high - low for low, high in marks)


def _read(spark: Any, source: str, options: dict[str, str]) -> tuple[int, int, float]:
    from pyspark.sql import functions as F

    started = time.perf_counter()
    frame = spark.read.format(source).options(**options).load()
    row = frame.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]
    return int(row["n"]), int(row["b"] or 0), time.perf_counter() - started


def measure_master(
    master: str,
    kafka: KafkaService,
    produced: dict[str, Produced],
    case_list: list[Case],
    sources: list[str],
    repeats: int,
    log: Any,
) -> list[dict[str, Any]]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from gateway.spark import local_session, register

    conf = {"spark.ui.showConsoleProgress": "false", **(spark_kafka_conf() if SPARKS in sources else {})}
    spark = local_session(master, app_name=f"bench-spark-{master}", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    out: list[dict[str, Any]] = []
    try:
        for case in case_list:
            topic = produced[case.name]
            options = {source: _options(kafka, source, topic.topic) for source in sources}
            for source in sources:  # warm-up
                _read(spark, source, options[source])
            samples: dict[str, list[tuple[int, int, float]]] = {source: [] for source in sources}
            for rep in range(repeats):
                for source in sources if rep % 2 == 0 else list(reversed(sources)):
                    samples[source].append(_read(spark, source, options[source]))
            for source in sources:
                result = _summarise(case, master, source, samples[source], topic, samples.get(OURS, []))
                out.append(result)
                log(
                    f"{master:9} {case.label:26} {source:13} {result['rows_per_s']['median']:>10,.0f} rows/s "
                    f"{result['MBps']['median']:>8,.1f} MB/s  ({result['rows']} rows, median "
                    f"{result['seconds']['median']:.2f}s of {repeats})"
                )
    finally:
        spark.stop()
    return out


def _options(kafka: KafkaService, source: str, topic: str) -> dict[str, str]:
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic}
    if source == OURS and kafka.name == "tansu":
        options["highWatermarkFrom"] = "fetch"
    return options


def _summarise(
    case: Case,
    master: str,
    source: str,
    samples: list[tuple[int, int, float]],
    produced: Produced,
    ours: list[tuple[int, int, float]],
) -> dict[str, Any]:
    rows, nbytes = samples[0][0], samples[0][1]
    assert all(s[0] == rows and s[1] == nbytes for s in samples), samples
    expected_rows = produced.messages if source == OURS or case.route == "plain" else produced.records
    assert rows == expected_rows, (source, case.name, rows, expected_rows)
    if source == OURS or case.route == "plain":
        assert nbytes == produced.payload_bytes, (source, case.name, nbytes, produced.payload_bytes)
    seconds = [s[2] for s in samples]
    result: dict[str, Any] = {
        "case": case.name,
        "master": master,
        "source": source,
        "rows": rows,
        "value_bytes": nbytes,
        "seconds": stat(seconds),
        "rows_per_s": stat(rows / s for s in seconds),
        "MBps": stat(nbytes / s / 1e6 for s in seconds),
        "payload_MBps": stat(produced.payload_bytes / s / 1e6 for s in seconds),
    }
    if source != OURS and ours:  # hybrid-kafka / kafka, per repetition: the same payload, so a ratio of time
        result["ours_over_theirs"] = stat(s[2] / o[2] for o, s in zip(ours, samples, strict=True))
    return result


def environment(kafka: KafkaService, sources: list[str]) -> dict[str, Any]:
    import confluent_kafka
    import pyspark

    jars = [p.name for p in spark_kafka_jars()] if SPARKS in sources else []
    return {
        "kafka": kafka.version,
        "kafka_backend": kafka.name,
        "pyspark": pyspark.__version__,
        "spark_jars": jars,
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "argv": " ".join(["python -m benchmarks.spark", *sys.argv[1:]]),
        "note": SHARED_MACHINE_NOTE,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--backend", default="kafka", help="kafka (default: Apache Kafka), tansu, noida, mock or external"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed reads per source, case and master (default 5)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every case's message count (default 1)")
    parser.add_argument("--output", default="spark", help="results name under benchmarks/results/ (default spark)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S%z")
    case_list = cases(args.scale)
    with start_kafka(args.backend) as kafka:
        sources = [OURS, SPARKS] if kafka.has("java_clients") else [OURS]
        if SPARKS not in sources:
            print(f"backend {kafka.name} lacks java_clients: Spark's Kafka source cannot read it, only {OURS} runs")
        produced: dict[str, Produced] = {}
        for case in case_list:
            t = time.perf_counter()
            produced[case.name] = produce_case(kafka, case)
            p = produced[case.name]
            print(
                f"{kafka.version}: {case.label}: {p.messages} messages, {p.payload_bytes / 1e6:.0f} MB, "
                f"{p.records} records ({time.perf_counter() - t:.1f}s)",
                flush=True,
            )
        results: list[dict[str, Any]] = []
        for master in MASTERS:
            results += measure_master(
                master, kafka, produced, case_list, sources, args.repeats, lambda line: print(line, flush=True)
            )
        env = environment(kafka, sources)
        for p in produced.values():
            try:
                kafka.delete_topic(p.topic)
            except Exception as exc:  # noqa: BLE001 - the numbers are in; a leftover topic only costs broker memory
                print(f"could not delete {p.topic}: {exc}")
    for r in results:
        if "ours_over_theirs" in r:
            print(
                f"{r['master']:9} {r['case']:13} {OURS} / {SPARKS} = {r['ours_over_theirs']['median']:.2f} "
                f"({r['ours_over_theirs']['min']:.2f}-{r['ours_over_theirs']['max']:.2f})"
            )
    path = save(
        args.output,
        {
            "kind": "spark-sources",
            "started": stamp,
            "env": env,
            "repeats": args.repeats,
            "partitions": PARTITIONS,
            "cases": [{**asdict(c), **asdict(produced[c.name])} for c in case_list],
            "results": results,
            "wall_seconds": time.perf_counter() - started,
        },
    )
    print(f"saved {path} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
