"""A fresh producer's first large message against a fresh raw confluent-kafka producer sending the same bytes.

    python -m benchmarks.first_message [--repeats 15] [--size 1000000] [--warm-ms MS] [--backend kafka]

Two cases, each timed from ``produce`` to the end of ``flush`` on a producer made just before
(construction is not timed; both sides pay their own):

``chunked``  a message of several segments: ``HybridProducer`` against raw confluent-kafka sending the
             same pre-built LinkedIn segments.
``redis``    a reference to a Redis store with a TTL (``Store.expires_per_payload``): ``HybridProducer``
             against redis-py's ``SET`` plus a raw envelope-sized record.
``s3``       a reference to an S3 store (the moto server): ``HybridProducer`` against boto3's
             ``put_object`` plus a raw envelope-sized record. Its first payload also waits for the
             topic's pending-journal batch marker, unless ``warm_topics`` wrote it ahead.

The gateway's first message of each kind needs the topic's ``cleanup.policy`` (issue 42.3). Each
repetition runs raw and gateway in an order that alternates, on topics created beforehand (as an
application's are), and also counts the ``DescribeConfigs`` lookups the send path waited for. It
reports medians with their spread and never asserts. ``--warm-ms MS`` has the gateway producer call
``warm_topics([topic])`` at construction and send its first message MS milliseconds later (an
application's start-up), which is what a producer told its topics ahead waits for.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Producer

import gateway.producer._compaction as compaction
from benchmarks.common import bench_kafka, payload
from benchmarks.variants import CHUNK_MESSAGE_MAX, SEGMENT, envelope_size
from gateway import HybridProducer, SizeThresholdPolicy
from gateway.protocol import split
from gateway.protocol.headers import encode_timestamp
from gateway.store import Store
from gateway.testing import KafkaService, RedisServer, S3Server
from stores import RedisStore, S3Store

TTL_S = 3600
CASES = ("chunked", "redis", "s3")


class _Waits:
    """Seconds the producing thread spent inside the cleanup.policy lookup (what the first send waited for)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._policy = compaction.CleanupPolicies.policy

    def install(self) -> None:
        original = self._policy

        def timed(policies: compaction.CleanupPolicies, topic: str) -> str | None:
            start = time.perf_counter()
            try:
                return original(policies, topic)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        compaction.CleanupPolicies.policy = timed  # type: ignore[method-assign,assignment]

    def take(self) -> tuple[float, int]:
        out = (self.seconds, self.calls)
        self.seconds, self.calls = 0.0, 0
        return out


def _segments(topic: str, value: bytes) -> list[dict[str, Any]]:
    ts = int(time.time() * 1000)
    parts = split(topic, 0, ts, uuid.uuid4(), b"k", value, SEGMENT, [("_t", encode_timestamp(ts))])
    return [{"value": bytes(r.value or b""), "key": r.key, "headers": r.headers} for r in parts]


def _conf(kafka: KafkaService) -> dict[str, Any]:
    return kafka.client_conf(**{"message.max.bytes": CHUNK_MESSAGE_MAX, "linger.ms": 5})


def _timed_send(producer: Any, send: Callable[[], None]) -> float:
    start = time.perf_counter()
    send()
    left = producer.flush(30)
    seconds = time.perf_counter() - start
    if left:
        raise RuntimeError(f"{left} records undelivered")
    return seconds


class _Stores:
    """The two stores' servers and raw clients, shared by every repetition."""

    def __init__(self, redis_server: RedisServer, s3_server: S3Server) -> None:
        self.redis = redis_server.client()
        self.s3 = s3_server.client()
        self.bucket = s3_server.bucket or s3_server.create_bucket(f"first-{uuid.uuid4().hex[:8]}")

    def raw_put(self, case: str, topic: str, value: bytes) -> None:
        if case == "redis":
            self.redis.set(f"raw:{topic}", value, ex=TTL_S)
        else:
            self.s3.put_object(Bucket=self.bucket, Key=f"raw/{topic}", Body=value)

    def store(self, case: str, rep: int) -> tuple[str, Store]:
        if case == "s3":
            return "s3", S3Store(self.s3, bucket=self.bucket, prefix=f"fm{rep}/")
        return "redis", RedisStore(self.redis, prefix=f"fm{rep}", ttl_seconds=TTL_S)


def _raw_first(
    kafka: KafkaService, case: str, topic: str, segments: list[dict[str, Any]], stores: _Stores, value: bytes
) -> float:
    raw = Producer(_conf(kafka))
    env_bytes = b"e" * envelope_size("redis" if case == "redis" else "s3", f"gw:{uuid.uuid4()}", len(value))

    def send() -> None:
        if case == "chunked":
            for segment in segments:
                raw.produce(topic, **segment)
        else:
            stores.raw_put(case, topic, value)
            raw.produce(topic, env_bytes, key=b"k")

    return _timed_send(raw, send)


def _gateway_first(
    kafka: KafkaService, case: str, topic: str, stores: _Stores, value: bytes, rep: int, waits: _Waits, warm_s: float
) -> tuple[float, float]:
    name, store = stores.store(case, rep)
    policy = SizeThresholdPolicy(reference_above=SEGMENT if case != "chunked" else 10**12, store=name)
    with HybridProducer(_conf(kafka), policy=policy, stores={name: store}) as producer:
        if warm_s >= 0:
            producer.warm_topics([topic])
            time.sleep(warm_s)
        waits.take()
        seconds = _timed_send(producer, lambda: producer.produce(topic, value, key=b"k"))
        waited, _ = waits.take()
    return seconds, waited


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_message", description=__doc__)
    parser.add_argument("--repeats", type=int, default=15, help="pairs per case (default 15)")
    parser.add_argument("--size", type=int, default=1_000_000, help="message size in bytes (default 1 MB)")
    parser.add_argument("--warm-ms", type=float, default=-1, help="warm_topics, then wait MS before sending")
    parser.add_argument("--backend", default="kafka", help="Kafka broker, as for python -m benchmarks")
    args = parser.parse_args(argv)
    waits = _Waits()
    waits.install()
    value = payload(args.size, seed=1)
    with bench_kafka(args.backend) as kafka, RedisServer() as redis_server, S3Server() as s3_server:
        stores = _Stores(redis_server, s3_server)
        times: dict[str, list[float]] = {k: [] for case in CASES for k in (f"{case}.raw", case)}
        lookups: dict[str, list[float]] = {case: [] for case in CASES}
        for rep in range(args.repeats):
            for case in CASES:
                topic = f"first-{case}-{rep}-{uuid.uuid4().hex[:6]}"
                kafka.create_topic(topic, 1)
                segments = _segments(topic, value)
                sides = ("raw", "gateway") if rep % 2 == 0 else ("gateway", "raw")
                for side in sides:
                    if side == "raw":
                        times[f"{case}.raw"].append(_raw_first(kafka, case, topic, segments, stores, value))
                        continue
                    seconds, waited = _gateway_first(kafka, case, topic, stores, value, rep, waits, args.warm_ms / 1000)
                    times[case].append(seconds)
                    lookups[case].append(waited)
                kafka.delete_topic(topic)
        stores.redis.flushdb()
    warm = f", warm_topics {args.warm_ms:g} ms ahead" if args.warm_ms >= 0 else ""
    print(f"{args.size // 1000} KB, {args.repeats} alternating pairs on {kafka.__class__.__name__}{warm}")
    for case in CASES:
        ours, raw_s = times[case], times[f"{case}.raw"]
        ratios = sorted(r / o for r, o in zip(raw_s, ours, strict=True))
        print(
            f"{case:8} first message: raw {_ms(raw_s)}  gateway {_ms(ours)}  "
            f"raw/gateway {statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})  "
            f"cleanup.policy wait on the send path {_ms(lookups[case])}"
        )
    return 0


def _ms(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    return f"{statistics.median(ms):6.1f} ms ({ms[0]:.1f}-{ms[-1]:.1f})"


if __name__ == "__main__":
    raise SystemExit(main())
