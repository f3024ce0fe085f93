"""The policy layer: per-message routing, store health and fallback, auditing."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

import pytest
import redis

from gateway import HybridConsumer, HybridProducer, Route, RouteKind, SizeThresholdPolicy, TopicOverride
from gateway.auditing import AuditType, CountingAuditor, CountingAuditStats, TopicAuditor
from gateway.errors import StoreUnavailableError
from gateway.health import StoreHealth
from gateway.policy import MessageInfo
from gateway.protocol import LM_HEADER
from gateway.protocol.envelope import ENVELOPE_HEADER, decode_envelope
from gateway.testing import KafkaService, RedisServer
from stores import RedisStore, S3Store
from tests.helpers import payload
from tests.kafkautil import read_partition


def info(size: int, topic: str = "t", segment: int = 800_000) -> MessageInfo:
    return MessageInfo(topic, None, size, None, segment)


def test_size_threshold_routes_and_overrides() -> None:
    policy = SizeThresholdPolicy(
        reference_above=8_000_000,
        store="redis",
        overrides={
            "media": TopicOverride(reference_above=2_000_000, store="s3"),
            "logs": TopicOverride(chunk_above=100_000),
        },
    )
    assert policy.route(info(100)) == Route.plain()
    assert policy.route(info(800_000)) == Route.plain()
    assert policy.route(info(800_001)) == Route.chunked()
    assert policy.route(info(8_000_000)) == Route.chunked()
    assert policy.route(info(8_000_001)) == Route.reference("redis")
    assert policy.route(info(3_000_000, "media")) == Route.reference("s3")
    assert policy.route(info(500_000, "logs")) == Route.chunked()
    assert policy.route(info(50_000, "logs")) == Route.plain()
    assert SizeThresholdPolicy().route(info(10**9)) == Route.chunked(), "no store: LinkedIn's behaviour"


def test_route_parsing() -> None:
    assert Route.parse("reference:s3") == Route(RouteKind.REFERENCE, "s3")
    assert str(Route.reference("redis")) == "reference:redis"
    with pytest.raises(ValueError):
        Route.parse("teleport")
    with pytest.raises(ValueError):
        Route(RouteKind.REFERENCE)


def test_store_health_marks_unhealthy_and_probes() -> None:
    health = StoreHealth(failure_threshold=3, window_ms=1000, probe_interval_ms=500)
    for t in (0, 100, 1050):  # the first one has left the window when the third comes
        health.failure(t)
    assert health.healthy
    health.failure(1060)  # three within a second
    assert not health.healthy
    assert not health.allow(1100)
    assert health.allow(1560)  # one probe per interval
    assert not health.allow(1600)
    health.failure(1610)  # failed probe: wait a full interval again
    assert not health.allow(2000) and health.allow(2110)
    health.success(2120)
    assert health.healthy and health.allow(2121)


def test_counting_audit_stats_refuse_updates_after_close() -> None:
    stats = CountingAuditStats(bucket_ms=1000)
    stats.update("t", 1500, 1, 10, AuditType.ATTEMPT)
    stats.update("t", 1999, 2, 5, AuditType.ATTEMPT)
    stats.update("t", 2000, 1, 1, AuditType.ATTEMPT)
    snap = {(k.topic, k.bucket): v for k, v in stats.snapshot().items()}
    assert snap == {("t", 1): (3, 15), ("t", 2): (1, 1)}
    stats.close()
    with pytest.raises(RuntimeError):
        stats.update("t", 1, 1, 1, AuditType.SUCCESS)


# ---------------------------------------------------------------------------------------------------
def raw_route(msg: Any) -> str:
    names = [k for k, _ in msg.headers() or []]
    if ENVELOPE_HEADER in names:
        return f"reference:{decode_envelope(msg.value()).store}"
    return "chunked" if LM_HEADER in names else "plain"


def test_mixed_workload_is_routed_as_the_policy_says(
    kafka: KafkaService,
    consumer_config: Any,
    redis_client: redis.Redis,
    s3_client: Any,
    s3_bucket: str,
    s3_prefix: str,
) -> None:
    topics = {name: f"t-{name}-{uuid.uuid4().hex[:8]}" for name in ("default", "media", "logs")}
    for t in topics.values():
        kafka.create_topic(t, partitions=1)
    stores = {
        "redis": RedisStore(redis_client, prefix=f"gw{uuid.uuid4().hex[:6]}"),
        "s3": S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix),
    }
    policy = SizeThresholdPolicy(
        reference_above=8_000_000,
        store="redis",
        overrides={
            topics["media"]: TopicOverride(reference_above=2_000_000, store="s3"),
            topics["logs"]: TopicOverride(chunk_above=100_000),
        },
    )
    producer = HybridProducer(kafka.producer_config(), policy=policy, stores=stores)
    sizes = [100, 500_000, 3_000_000, 30_000_000]
    expected_routes = {
        "default": ["plain", "plain", "chunked", "reference:redis"],
        "media": ["plain", "plain", "reference:s3", "reference:s3"],
        "logs": ["plain", "chunked", "chunked", "reference:redis"],
    }
    for name, topic in topics.items():
        for i, size in enumerate(sizes):
            producer.produce(topic, payload(size, i), key=f"{name}-{i}".encode())
    assert producer.flush(60) == 0
    for name, topic in topics.items():
        consumer = HybridConsumer(consumer_config(**{"enable.auto.commit": False}), stores=stores)
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < len(sizes) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
        consumer.close()
        assert [hashlib.sha256(m.value()).hexdigest() for m in got] == [
            hashlib.sha256(payload(s, i)).hexdigest() for i, s in enumerate(sizes)
        ]
        # what really went over the wire: the last record of every logical message, read raw
        raw_records = read_partition(consumer_config(), topic, 0, _record_count(expected_routes[name], sizes))
        routes = []
        for m in raw_records:
            route = raw_route(m)
            lm = [v for k, v in m.headers() or [] if k == LM_HEADER]
            if (
                route == "chunked"
                and lm
                and int.from_bytes(lm[-1][17:21], "big") != int.from_bytes(lm[-1][21:25], "big") - 1
            ):
                continue  # not the last segment
            routes.append(route)
        assert routes == expected_routes[name], name
    redis_keys = list(redis_client.scan_iter(match=f"{stores['redis'].prefix}:*"))
    assert any(b":t-default-" in k for k in redis_keys) and any(b":t-logs-" in k for k in redis_keys)
    listing = s3_client.list_objects_v2(Bucket=s3_bucket, Prefix=s3_prefix).get("Contents", [])
    assert sum(1 for o in listing if topics["media"] in o["Key"] and "_pending" not in o["Key"]) == 2


def _record_count(routes: list[str], sizes: list[int]) -> int:
    segment = 800_000 - 33 - 512 - 16 - 40  # room the producer keeps for the header, key and headers
    total = 0
    for route, size in zip(routes, sizes, strict=True):
        total += -(-size // min(segment, size)) if route == "chunked" and size > 100_000 else 1
    return total


def test_store_outage_falls_back_or_fails_fast_and_recovers(
    kafka: KafkaService, topic: str, consumer_config: Any
) -> None:
    with RedisServer(from_env=False) as server:
        client = redis.Redis.from_url(server.url, socket_timeout=1, socket_connect_timeout=1)
        store = RedisStore(client, prefix="gwfail")
        producer = HybridProducer(
            {
                **kafka.producer_config(),
                "reference.fallback.inline.max.bytes": 4_000_000,
                "store.failure.threshold": 2,
                "store.probe.interval.ms": 300,
                # each write answered inside produce(): the refusal below is raised there, not reported later
                "reference.write.window": 1,
            },
            policy=SizeThresholdPolicy(reference_above=1_000_000, store="redis"),
            stores={"redis": store},
        )
        sent: dict[bytes, bytes] = {}

        def send(i: int, size: int) -> None:
            value = payload(size, i)
            producer.produce(topic, value, key=f"m{i}".encode())
            sent[f"m{i}".encode()] = value

        consumer = HybridConsumer(consumer_config(), stores={"redis": store})
        consumer.subscribe([topic])
        got: dict[bytes, bytes] = {}

        def receive(count: int) -> None:
            deadline = time.monotonic() + 60
            while len(got) < count and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got[msg.key()] = msg.value()

        send(0, 2_000_000)  # healthy: by reference
        assert producer.flush(30) == 0 and producer.metrics()["reference.messages"] == 1
        receive(1)  # read it before the outage: this test's redis-server keeps nothing across a restart
        server.stop()
        started = time.monotonic()
        send(1, 2_000_000)  # the write fails: chunked instead, nothing lost
        send(2, 3_000_000)
        with pytest.raises(StoreUnavailableError):
            producer.produce(topic, payload(6_000_000, 3), key=b"m3")  # over the inline cap: fail fast
        assert time.monotonic() - started < 10, "no hang"
        assert not producer.health["redis"].healthy
        assert producer.metrics()["fallbacks"] == 2 and producer.metrics()["fallback.refused"] == 1
        server.start()
        time.sleep(0.4)  # one probe interval
        send(4, 2_000_000)  # the probe succeeds: back to Redis
        send(5, 2_500_000)
        assert producer.flush(30) == 0
        metrics = producer.metrics()
        assert producer.health["redis"].healthy
        assert metrics["reference.messages"] == 3 and metrics["chunked.messages"] == 2
        receive(len(sent))
        consumer.close()
        assert got == sent


def test_produced_and_consumed_audit_counts_agree(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_client: redis.Redis
) -> None:
    store = RedisStore(redis_client, prefix=f"gwa{uuid.uuid4().hex[:6]}")
    produced = CountingAuditor(bucket_ms=60_000)
    producer = HybridProducer(
        kafka.producer_config(),
        stores={"redis": store},
        auditor=produced,
        policy=SizeThresholdPolicy(reference_above=2_000_000, store="redis"),
    )
    sizes = [10, 1000, 900_000, 1_500_000, 3_000_000, 50]
    for i, size in enumerate(sizes):
        producer.produce(topic, payload(size, i), key=f"a{i}".encode())
    assert producer.flush(30) == 0
    consumed = CountingAuditor(bucket_ms=60_000)
    consumer = HybridConsumer(consumer_config(), stores={"redis": store}, auditor=consumed)
    consumer.subscribe([topic])
    n = 0
    deadline = time.monotonic() + 30
    while n < len(sizes) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            n += 1
    consumer.close()
    attempts = produced.counts(AuditType.ATTEMPT)
    successes = produced.counts(AuditType.SUCCESS)
    assert sum(c for c, _ in attempts.values()) == len(sizes) == sum(c for c, _ in successes.values())
    assert produced.counts(AuditType.FAILURE) == {}
    assert consumed.counts(AuditType.SUCCESS) == successes, "same counts and bytes per topic and bucket"


def test_audit_counts_are_published_to_an_audit_topic(kafka: KafkaService, topic: str, consumer_config: Any) -> None:
    audit_topic = f"audit-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(audit_topic, partitions=1)
    producer = HybridProducer(kafka.producer_config())
    auditor = TopicAuditor(producer, audit_topic, bucket_ms=60_000)
    producer = HybridProducer(kafka.producer_config(), auditor=auditor)
    auditor.producer = producer
    for i in range(5):
        producer.produce(topic, payload(1_000_000 + i, i), key=b"k")
    producer.close(30)
    records = read_partition(consumer_config(), audit_topic, 0, 2)
    published = sorted((json.loads(m.value())["type"], json.loads(m.value())["messages"]) for m in records)
    assert published == [("ATTEMPT", 5), ("SUCCESS", 5)]


def test_a_route_to_a_missing_store_is_a_configuration_error(kafka: KafkaService, topic: str) -> None:
    from gateway.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        HybridProducer(kafka.producer_config(), policy=SizeThresholdPolicy(reference_above=10, store="redis"))
    producer = HybridProducer(kafka.producer_config())
    with pytest.raises(ConfigurationError):
        producer.produce(topic, payload(2_000_000), route="reference:redis")
    assert producer.metrics()["fallbacks"] == 0
