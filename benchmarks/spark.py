"""Spark source throughput: the same mixed topic read by ``hybrid-kafka`` on local[1] and on local[2].

The topic holds plain records, chunked messages (LinkedIn segments) and Redis references, spread
over four partitions. Each master gets its own SparkSession; one untimed read warms the JVM and
the Python workers up, then every timed read aggregates the value bytes so that every row and
every payload is really produced. Rows/s counts messages, MB/s counts value bytes (10^6 B/s).

    python -m benchmarks.spark [--backend tansu|noida|mock|external] [--mb 200] [--repeats 3]

Tansu's ListOffsets answer is wrong for multi-record batches, so against Tansu the source is
told to confirm end offsets with a fetch (``highWatermarkFrom=fetch``). The mock cluster keeps
only 5 MiB per partition, so against it the data is capped at 16 MB.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from typing import Any

from benchmarks.common import save
from gateway import HybridProducer
from gateway.testing import RedisServer, ServiceUnavailable, start_kafka
from stores import RedisStore

PARTITIONS = 4
SEGMENT = 256_000


def build_topic(kafka: Any, topic: str, total_bytes: int, store: RedisStore | None, seed: int = 7) -> dict[str, int]:
    """By count 75 % plain (0.2-10 KB), 20 % chunked (0.3-2 MB), 5 % references (0.1-1 MB; chunked without Redis)."""
    kafka.create_topic(topic, partitions=PARTITIONS)
    producer = HybridProducer(
        {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT, "linger.ms": 5,
         "queue.buffering.max.kbytes": 1_048_576},
        stores={"redis": store} if store is not None else None,
    )
    rng = random.Random(seed)
    block = rng.randbytes(1 << 20)
    counts = {"plain": 0, "chunked": 0, "reference": 0, "bytes": 0, "messages": 0}
    sent = 0
    i = 0
    while sent < total_bytes:
        pick = rng.random()
        if pick < 0.75:
            size, route = rng.randint(200, 10_000), "plain"
        elif pick < 0.95 or store is None:
            size, route = rng.randint(300_000, 2_000_000), "chunked"
        else:
            size, route = rng.randint(100_000, 1_000_000), "reference:redis"
        start = rng.randrange(0, len(block))
        value = (block[start:] + block)[:size]
        if len(value) < size:
            value = (value * (size // max(1, len(value)) + 1))[:size]
        while True:
            try:
                producer.produce(topic, value, f"k{i}".encode(), i % PARTITIONS, route=route)
                break
            except BufferError:
                producer.poll(0.05)
        counts[route.split(":")[0]] += 1
        counts["bytes"] += size
        counts["messages"] += 1
        sent += size
        i += 1
        producer.poll(0)
    assert producer.flush(300) == 0
    return counts


def measure(master: str, options: dict[str, str], repeats: int) -> dict[str, Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import functions as F

    from gateway.spark import local_session, register

    spark = local_session(master, app_name=f"bench-spark-{master}")
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        def run() -> tuple[int, int, float]:
            started = time.perf_counter()
            frame = spark.read.format("hybrid-kafka").options(**options).load()
            row = frame.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]
            return int(row["n"]), int(row["b"] or 0), time.perf_counter() - started

        run()  # warm-up: JVM, Python workers, connections
        samples = [run() for _ in range(repeats)]
    finally:
        spark.stop()
    rows, nbytes = samples[0][0], samples[0][1]
    assert all(s[0] == rows and s[1] == nbytes for s in samples), samples
    seconds = [s[2] for s in samples]
    median = statistics.median(seconds)
    return {"master": master, "rows": rows, "bytes": nbytes, "seconds": seconds, "median_s": median,
            "rows_per_s": rows / median, "MBps": nbytes / median / 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="tansu", help="tansu (default), noida, mock or external")
    parser.add_argument("--mb", type=int, default=200, help="megabytes of values to produce (default 200)")
    parser.add_argument("--repeats", type=int, default=3, help="timed reads per master (default 3)")
    parser.add_argument("--split", type=int, default=None,
                        help="maxRecordsPerPartition, to measure range splitting (default: one range per partition)")
    args = parser.parse_args(argv)
    total = args.mb * 1_000_000
    if args.backend == "mock":
        total = min(total, 16_000_000)
    redis_server: RedisServer | None = RedisServer()
    try:
        assert redis_server is not None
        redis_server.start()
    except ServiceUnavailable as exc:
        print(f"no Redis ({exc.reason}): references become chunked messages")
        redis_server = None
    try:
        with start_kafka(args.backend) as kafka:
            backend = kafka.version if kafka.version.startswith(kafka.name) else f"{kafka.name} {kafka.version}"
            store = RedisStore(redis_server.client(), prefix=f"bench{uuid.uuid4().hex[:6]}") if redis_server else None
            topic = f"bench-spark-{uuid.uuid4().hex[:8]}"
            started = time.perf_counter()
            counts = build_topic(kafka, topic, total, store)
            print(f"backend {backend}: produced {counts['messages']} messages, {counts['bytes'] / 1e6:.0f} MB "
                  f"({counts['plain']} plain, {counts['chunked']} chunked, {counts['reference']} references) "
                  f"in {time.perf_counter() - started:.1f}s", flush=True)
            options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic}
            if kafka.name == "tansu":
                options["highWatermarkFrom"] = "fetch"
            if store is not None and redis_server is not None:
                options.update({"redis.url": redis_server.url, "redis.prefix": store.prefix})
            if args.split:
                options["maxRecordsPerPartition"] = str(args.split)
            results = []
            for master in ("local[1]", "local[2]"):
                result = measure(master, options, args.repeats)
                assert result["rows"] == counts["messages"] and result["bytes"] == counts["bytes"], (result, counts)
                results.append(result)
                print(f"{master}: {result['rows_per_s']:8.0f} rows/s {result['MBps']:7.1f} MB/s "
                      f"(median of {args.repeats}: {result['median_s']:.2f}s for {result['rows']} rows)", flush=True)
            ratio = results[1]["MBps"] / results[0]["MBps"]
            print(f"local[2] / local[1] = {ratio:.2f}x  ({os.cpu_count()} CPUs; the broker"
                  f"{' and Redis' if store else ''} share them)")
            try:
                kafka.delete_topic(topic)
            except Exception as exc:  # noqa: BLE001 - the numbers are in; a leftover topic only costs broker memory
                print(f"could not delete {topic}: {exc}")
    finally:
        if redis_server is not None:
            redis_server.close()
    path = save("spark", {"backend": backend, "produced": counts, "results": results, "ratio": ratio,
                          "cpus": os.cpu_count(), "options": {k: v for k, v in options.items()
                                                              if not k.startswith("kafka.")}})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
