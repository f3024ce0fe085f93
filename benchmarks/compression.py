"""``reference.compression``: store bytes per payload byte and throughput of each codec, for a compressible
payload (JSON-like text) and an incompressible one (random bytes).

``python -m benchmarks.compression [--repeat 3] [--size-mb 10] [--backend kafka] [--no-route]`` (or
``gateway bench --suite compression``): first the codecs alone, best of ``--repeat`` on ``--size-mb`` MB
of each kind (encode is what the producer adds per message, decode what the consumer adds, bounded
decoding as it runs); then, unless ``--no-route``, the Redis and S3 routes through Kafka with
``reference.compression`` off (``none``) and ``zstd``, alternating, ``--repeat`` times: produce-and-flush
and consume MB/s of payload bytes, and the store's bytes written per payload byte. Results go to
``benchmarks/results/compression.json``, which docs/benchmarks.md's compression section is rendered from.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, mbps, stat
from benchmarks.variants import CHUNK_MESSAGE_MAX, CONSUMER_CONF, HYBRID_CONSUMER, PRODUCER_CONF, read_hybrid
from gateway import HybridConsumer, HybridProducer
from gateway.protocol.payload_encoding import decode_payload, encode_payload
from gateway.testing import KafkaService, RedisServer, S3Server, start_kafka
from stores import RedisStore, S3Store, Store

MB = 1_000_000
OUTPUT = RESULTS / "compression.json"
CODECS = (None, "zstd", "lz4", "gzip")


ROUTE_CODECS = ("none", "zstd")
ROUTE_COUNTS = {"redis": 6, "s3": 3}
"""10 MB payloads per run on each route (moto is slower per byte than redis-server)."""


def jsonish(size: int, start: int = 0) -> bytes:
    row = b'{"order": %d, "customer": "c-%05d", "sku": "SKU-%04d", "qty": %d, "ok": true}\n'
    rows = (row % (i, i % 9973, i % 811, i % 7) for i in range(start, start + size // 40 + 1))
    return b"".join(rows)[:size]


def payloads(kind: str, size: int, count: int) -> list[bytes]:
    if kind == "random":
        return [os.urandom(size) for _ in range(count)]
    return [jsonish(size, start=i * size) for i in range(count)]


def run_route(kafka: KafkaService, store: Store, codec: str, values: list[bytes]) -> tuple[float, float, int]:
    """Seconds to produce-and-flush and to consume ``values`` through the store's route on a fresh topic, and
    the bytes the store wrote."""
    topic = f"comp-{store.name}-{codec}-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=1)
    conf = kafka.client_conf(**{**PRODUCER_CONF, "message.max.bytes": CHUNK_MESSAGE_MAX})
    conf["reference.compression"] = codec
    try:
        with HybridProducer(conf, stores={store.name: store}) as producer:
            producer.prepare_topics([topic])
            before = int(store.metrics()["bytes_written"])
            started = time.perf_counter()
            for value in values:
                producer.produce(topic, value, partition=0, route=f"reference:{store.name}")
                producer.poll(0)
            if producer.flush(120):
                raise RuntimeError(f"{topic}: records still undelivered after 120 s")
            produced = time.perf_counter() - started
            written = int(store.metrics()["bytes_written"]) - before
        consumer_conf = kafka.client_conf(**CONSUMER_CONF)
        consumer_conf.update(kafka.consumer_defaults)
        consumer_conf.update({**HYBRID_CONSUMER, "group.id": f"comp-{uuid.uuid4().hex[:8]}"})
        consumer = HybridConsumer(consumer_conf, stores={store.name: store})
        try:
            consumer.list_topics(topic, timeout=10)
            started = time.perf_counter()
            moved = read_hybrid(consumer, topic, len(values))
            consumed = time.perf_counter() - started
        finally:
            consumer.close()
        if moved != sum(map(len, values)):
            raise AssertionError(f"{topic}: read {moved} payload bytes of {sum(map(len, values))}")
    finally:
        kafka.delete_topic(topic)
    return produced, consumed, written


def measure_routes(backend: str, size: int, repeat: int) -> dict[str, Any]:
    """Compression off and on through the Redis and S3 routes, per payload kind; off and on alternate."""
    rows: list[dict[str, Any]] = []
    with start_kafka(backend) as kafka, RedisServer() as redis_server, S3Server() as s3_server:
        bucket = s3_server.bucket or s3_server.create_bucket(f"bench-comp-{uuid.uuid4().hex[:8]}")
        prefix = f"bench-comp-{uuid.uuid4().hex[:6]}"
        env = {"kafka": str(kafka.version), "kafka_backend": kafka.name, "redis": redis_server.server_version()}
        makers: dict[str, Callable[[], Store]] = {
            "redis": lambda: RedisStore(redis_server.client(), prefix=prefix),
            "s3": lambda: S3Store(s3_server.client(max_pool_connections=16), bucket=bucket, prefix=f"{prefix}/"),
        }
        for route, make in makers.items():
            for kind in ("JSON-like", "random"):
                values = payloads(kind, size, ROUTE_COUNTS[route])
                moved = sum(map(len, values))
                samples: dict[str, dict[str, list[float]]] = {c: {"produce": [], "consume": []} for c in ROUTE_CODECS}
                stored: dict[str, float] = {}
                for rep in range(repeat):
                    for codec in ROUTE_CODECS if rep % 2 == 0 else ROUTE_CODECS[::-1]:
                        produced, consumed, written = run_route(kafka, make(), codec, values)
                        samples[codec]["produce"].append(mbps(produced, moved))
                        samples[codec]["consume"].append(mbps(consumed, moved))
                        stored[codec] = written / moved
                for codec in ROUTE_CODECS:
                    row: dict[str, Any] = {"route": route, "payload": kind, "codec": codec, "messages": len(values)}
                    row |= {"store_per_payload_byte": stored[codec]}
                    row |= {side: stat(v) for side, v in samples[codec].items()}
                    rows.append(row)
                    print(
                        f"{route:5} {kind:9} {codec:4}: store {stored[codec]:.4f} B/B, produce "
                        f"{row['produce']['median']:6.0f} MB/s, consume {row['consume']['median']:6.0f} MB/s",
                        flush=True,
                    )
    return {"backend": backend, "size": size, "repeat": repeat, "env": env, "rows": rows}


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(size: int, repeat: int) -> list[dict[str, Any]]:
    """One row per payload kind and codec; no codec (stored as it is) has nothing to time."""
    rows: list[dict[str, Any]] = []
    for kind, data in (("JSON-like", jsonish(size)), ("random", os.urandom(size))):
        for codec in CODECS:
            stored = bytes(encode_payload(data, codec))
            assert decode_payload(stored, codec, len(data)) == data
            row: dict[str, Any] = {
                "payload": kind,
                "codec": codec or "none",
                "store_per_payload_byte": len(stored) / len(data),
                "encode_mbps": None,
                "decode_mbps": None,
            }
            if codec is not None:
                enc = best(lambda: encode_payload(data, codec), repeat)  # noqa: B023
                dec = best(lambda: decode_payload(stored, codec, len(data)), repeat)  # noqa: B023
                row["encode_mbps"], row["decode_mbps"] = size / MB / enc, size / MB / dec
            rows.append(row)
    return rows


def main(argv: list[str] | None = None, output: Path = OUTPUT) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compression", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=10)
    parser.add_argument("--backend", default="kafka", help="broker of the route runs: kafka (default) or mock")
    parser.add_argument("--no-route", action="store_true", help="the codecs alone, no route through Kafka")
    args = parser.parse_args(argv)
    started, clock = datetime.now(timezone.utc), time.perf_counter()
    rows = measure(args.size_mb * MB, args.repeat)
    result = {
        "kind": "compression",
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "wall_seconds": time.perf_counter() - clock,
        "size": args.size_mb * MB,
        "repeat": args.repeat,
        "env": {
            "cramjam": importlib.metadata.version("cramjam"),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "rows": rows,
    }
    print("| payload | codec | store bytes per payload byte | encode MB/s | decode MB/s |")
    for r in rows:
        enc, dec = r["encode_mbps"], r["decode_mbps"]
        cells = ("n/a", "n/a") if enc is None else (f"{enc:.0f}", f"{dec:.0f}")
        print(f"| {r['payload']} | {r['codec']} | {r['store_per_payload_byte']:.4f} | {cells[0]} | {cells[1]} |")
    if not args.no_route:
        result["routes"] = measure_routes(args.backend, args.size_mb * MB, args.repeat)
    result["wall_seconds"] = time.perf_counter() - clock
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
