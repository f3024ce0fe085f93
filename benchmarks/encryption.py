"""``reference.encryption`` side by side: the Redis and S3 routes with AES-256-GCM on and off.

``python -m benchmarks.encryption [--backend kafka|mock] [--size 10MB] [--count N] [--reps R]``

Each repetition produces ``count`` payloads of ``size`` bytes through ``HybridProducer`` on the
route (Redis with ``reference.write.window=8``, as ``gateway bench`` runs it), flushes, then reads
them all back through ``HybridConsumer``; the clock covers produce-and-flush and consume, separately.
Off and on alternate within each repetition so drift in the machine's load hits both alike. Also
measured: sealing and opening alone (no I/O), the ceiling of what encryption can cost. Results go
to ``benchmarks/results/encryption.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import payload
from benchmarks.variants import CHUNK_MESSAGE_MAX, CONSUMER_CONF, HYBRID_CONSUMER, PRODUCER_CONF, REDIS_WRITE_WINDOW
from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.encryption import Binding, LocalKeyRing, open_sealed, seal
from gateway.testing import KafkaService, RedisServer, S3Server, start_kafka
from stores import RedisStore, S3Store

RESULTS = Path(__file__).resolve().parent / "results" / "encryption.json"


def _size(text: str) -> int:
    units = {"kb": 1000, "mb": 1000**2, "gb": 1000**3}
    raw = text.strip().lower()
    for suffix, factor in units.items():
        if raw.endswith(suffix):
            return int(float(raw[: -len(suffix)]) * factor)
    return int(raw)


def cipher_only(size: int, reps: int) -> dict[str, float]:
    """MB/s of sealing and opening alone (key ring, no I/O): what encryption costs at most per byte."""
    ring = LocalKeyRing({"k": bytes(32)}, "k")
    data = payload(size, 1)
    binding = Binding("t", uuid.uuid4(), "redis", "gw:t:x#1x1")
    seal_s, open_s = [], []
    for _ in range(reps):
        started = time.perf_counter()
        sealed = seal(ring, binding, data)
        seal_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        assert open_sealed(ring, sealed.encryption, binding, sealed.payload) == data
        open_s.append(time.perf_counter() - started)
    return {"seal_mbps": size / 1e6 / statistics.median(seal_s), "open_mbps": size / 1e6 / statistics.median(open_s)}


def run_route(
    kafka: KafkaService, store: Any, route: str, encrypted: bool, values: list[bytes], ring: LocalKeyRing
) -> tuple[float, float, float, float]:
    """Wall seconds to produce and to consume ``values`` through the route (fresh topic), then the process's
    CPU seconds for each: on a machine others load, CPU time is the steadier measure of what encryption adds."""
    topic = f"enc-{route}-{'on' if encrypted else 'off'}-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=1)
    conf = kafka.client_conf(**{**PRODUCER_CONF, "message.max.bytes": CHUNK_MESSAGE_MAX})
    if route == "redis":
        conf["reference.write.window"] = REDIS_WRITE_WINDOW
    if encrypted:
        conf["reference.encryption"] = "aes256-gcm"
    policy = SizeThresholdPolicy(reference_above=800_000, store=route)
    with HybridProducer(conf, policy=policy, stores={route: store}, key_provider=ring) as producer:
        producer.produce(topic, b"warm-up", partition=0)
        producer.flush(30)
        started, cpu = time.perf_counter(), time.process_time()
        for value in values:
            producer.produce(topic, value, partition=0)
            producer.poll(0)
        assert producer.flush(120) == 0
        produced, produced_cpu = time.perf_counter() - started, time.process_time() - cpu
    consumer_conf = kafka.client_conf(**CONSUMER_CONF)
    consumer_conf.update(kafka.consumer_defaults)
    consumer_conf.update(HYBRID_CONSUMER)
    consumer_conf.update({"group.id": f"enc-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"})
    consumer = HybridConsumer(consumer_conf, stores={route: store}, key_provider=ring)
    consumer.subscribe([topic])
    try:
        first = consumer.poll(30)  # the warm-up record: the clock starts once the group has the partition
        assert first is not None and first.value() == b"warm-up"
        started, cpu = time.perf_counter(), time.process_time()
        seen = 0
        deadline = time.monotonic() + 120
        while seen < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None and len(msg.value() or b"") == len(values[seen])
            seen += 1
        consumed, consumed_cpu = time.perf_counter() - started, time.process_time() - cpu
        assert seen == len(values), f"{seen} of {len(values)} read back"
    finally:
        consumer.close()
    return produced, consumed, produced_cpu, consumed_cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.encryption", description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="kafka", help="kafka (Apache Kafka, default) or mock")
    parser.add_argument("--size", type=_size, default=10_000_000)
    parser.add_argument("--count", type=int, default=20, help="payloads per repetition on Redis (S3: a quarter)")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    ring = LocalKeyRing({"bench": bytes(range(32))}, "bench")
    result: dict[str, Any] = {"size": args.size, "backend": args.backend, "cipher": cipher_only(args.size, 5)}
    print(f"seal {result['cipher']['seal_mbps']:.0f} MB/s, open {result['cipher']['open_mbps']:.0f} MB/s (no I/O)")
    with start_kafka(args.backend) as kafka, RedisServer() as redis_server, S3Server() as s3_server:
        redis_server.start()
        s3_server.start()
        bucket = s3_server.bucket or s3_server.create_bucket(f"bench-enc-{uuid.uuid4().hex[:8]}")
        stores = {
            "redis": RedisStore(redis_server.client(), prefix=f"benc{uuid.uuid4().hex[:6]}"),
            "s3": S3Store(s3_server.client(max_pool_connections=16), bucket=bucket, prefix="bench-enc/"),
        }
        for route, store in stores.items():
            count = args.count if route == "redis" else max(2, args.count // 4)
            values = [payload(args.size, seed) for seed in range(count)]
            moved = args.size * count / 1e6
            samples: dict[str, dict[str, list[float]]] = {
                mode: {"produce": [], "consume": [], "produce_cpu_ms": [], "consume_cpu_ms": []}
                for mode in ("off", "on")
            }
            for rep in range(args.reps):
                for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                    produced, consumed, p_cpu, c_cpu = run_route(kafka, store, route, mode == "on", values, ring)
                    samples[mode]["produce"].append(moved / produced)
                    samples[mode]["consume"].append(moved / consumed)
                    samples[mode]["produce_cpu_ms"].append(p_cpu * 1000 / count)
                    samples[mode]["consume_cpu_ms"].append(c_cpu * 1000 / count)
            row = {mode: {side: statistics.median(v) for side, v in sides.items()} for mode, sides in samples.items()}
            row["samples"] = samples  # type: ignore[assignment]
            result[route] = row
            for side in ("produce", "consume"):
                off, on = row["off"][side], row["on"][side]
                cpu_off, cpu_on = row["off"][f"{side}_cpu_ms"], row["on"][f"{side}_cpu_ms"]
                print(
                    f"{route:5} {side:7}: off {off:5.0f} MB/s  on {on:5.0f} MB/s  on/off {on / off:.2f}"
                    f"   CPU per payload off {cpu_off:5.1f} ms  on {cpu_on:5.1f} ms"
                )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
