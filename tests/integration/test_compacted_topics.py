"""Large messages on compacted topics, on a broker whose log cleaner really compacts.

The topic is set up to compact as soon as it can (1 s segments, dirty ratio 0.01, no compaction
lag, tombstones kept 1 s): 20 keys updated 10 times with values from 100 B to 5 MB, three keys
deleted, a compaction waited for, then a fresh consumer must read exactly the latest value of every
live key, and after ``reconcile`` the store must hold exactly the payloads of the live envelopes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.producer._compaction import CompactedTopicError
from gateway.protocol.classify import RecordKind, classify
from gateway.protocol.envelope import decode_envelope
from gateway.testing import ApacheKafka, KafkaService, ServiceUnavailable
from stores import RedisStore

pytestmark = pytest.mark.requires("compaction")

SEGMENT = 200_000
COMPACT_FAST = {
    "cleanup.policy": "compact",
    "segment.ms": "1000",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "1000",
}
DELETED = (3, 7, 11)


def _size(key: int, version: int) -> int:
    if key % 5 == 0 and version in (3, 9):
        return 5_000_000
    return (100, 2_000, 60_000, 400_000, 1_200_000)[(key + version) % 5]


def _value(key: int, version: int) -> bytes:
    head = f"k{key}v{version}:".encode()
    return (head * (_size(key, version) // len(head) + 1))[: _size(key, version)]


@pytest.fixture
def compacted(kafka: KafkaService) -> Any:
    name = f"c-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(name, 1, COMPACT_FAST)
    yield name
    kafka.delete_topic(name)


def _raw_records(kafka: KafkaService, topic: str) -> list[tuple[bytes | None, bytes | None, Any]]:
    consumer = Consumer({**kafka.consumer_config(), "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes | None, bytes | None, Any]] = []
    try:
        while True:
            msg = consumer.poll(10.0)
            assert msg is not None, "no end of partition within 10 s"
            if msg.error():
                break
            out.append((msg.key(), msg.value(), msg.headers()))
    finally:
        consumer.close()
    return out


def test_a_large_message_goes_by_reference_and_never_in_chunks(
    kafka: KafkaService, compacted: str, redis_client: Any
) -> None:
    store = RedisStore(redis_client, prefix=compacted)
    config = {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}
    # the policy would chunk it (no reference threshold): the compacted topic overrules that
    with HybridProducer(config, policy=SizeThresholdPolicy(store="redis"), stores={"redis": store}) as producer:
        assert producer.route_for(compacted, 3 * SEGMENT).store == "redis"
        producer.produce(compacted, b"x" * (3 * SEGMENT), key=b"k")
        with pytest.raises(CompactedTopicError, match="route=chunked"):
            producer.produce(compacted, b"x" * (3 * SEGMENT), key=b"k", route="chunked")
        producer.produce(compacted, b"small", key=b"k")  # one record: plain, as anywhere
        assert producer.flush(30) == 0
        assert producer.metrics()["chunked.messages"] == 0
    with HybridProducer(config) as bare, pytest.raises(CompactedTopicError, match="give the producer a store"):
        bare.produce(compacted, b"x" * (3 * SEGMENT), key=b"k")
    assert len(list(store.list_locators(compacted))) == 1


def test_payloads_of_a_compacted_topic_never_expire(
    kafka: KafkaService, compacted: str, topic: str, redis_client: Any
) -> None:
    store = RedisStore(redis_client, prefix=compacted, ttl_seconds=600)
    policy = SizeThresholdPolicy(reference_above=1_000, store="redis")  # below one segment: the policy's choice
    with HybridProducer(kafka.producer_config(), policy=policy, stores={"redis": store}) as producer:
        producer.produce(compacted, b"c" * 5_000, key=b"k")
        producer.produce(topic, b"d" * 5_000, key=b"k")
        assert producer.flush(30) == 0
    ttls = {}
    for name in (compacted, topic):
        (locator, _), *rest = store.list_locators(name)
        assert rest == []
        ttls[name] = redis_client.ttl(locator.split("#")[0] + ":0")
    assert ttls[compacted] == -1  # no expiry: compaction keeps the envelope forever
    assert 0 < ttls[topic] <= 600


def test_twenty_keys_updated_ten_times_compact_to_the_latest_values(
    kafka: KafkaService, compacted: str, redis_client: Any, redis_server: Any, spark: Any
) -> None:
    from gateway.spark.reconcile import reconcile

    store = RedisStore(redis_client, prefix=compacted)
    policy = SizeThresholdPolicy(reference_above=2_000_000, store="redis")
    latest: dict[bytes, bytes] = {}
    config = {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}
    with HybridProducer(config, policy=policy, stores={"redis": store}) as producer:
        for version in range(10):
            for key in range(20):
                name = f"key-{key:02d}".encode()
                latest[name] = _value(key, version)
                producer.produce(compacted, latest[name], key=name)
            producer.flush(60)
        for key in DELETED:
            producer.produce(compacted, None, key=f"key-{key:02d}".encode())  # a tombstone, passed through
            del latest[f"key-{key:02d}".encode()]
        assert producer.flush(60) == 0
        assert producer.metrics()["chunked.messages"] == 0
        written = len(list(store.list_locators(compacted)))
        # the segment holding everything rolls once a record arrives after segment.ms
        deadline = time.monotonic() + 90
        records = _raw_records(kafka, compacted)
        while len(records) > len(latest) + len(DELETED) + 1 and time.monotonic() < deadline:
            time.sleep(1.5)
            producer.produce(compacted, b"roll", key=b"~roll")
            producer.flush(30)
            records = _raw_records(kafka, compacted)
    assert len(records) <= len(latest) + len(DELETED) + 1, f"not compacted: {len(records)} records remain"

    conf = {**kafka.consumer_config(), "enable.partition.eof": True}
    state: dict[bytes, bytes] = {}
    with HybridConsumer(conf, stores={"redis": store}) as consumer:
        consumer.assign([TopicPartition(compacted, 0, 0)])
        while True:
            msg = consumer.poll(10.0)
            assert msg is not None
            if msg.error():
                break
            if msg.value() is None:
                state.pop(msg.key(), None)
            elif msg.key() != b"~roll":
                state[msg.key()] = msg.value()
    assert sorted(state) == sorted(latest)
    assert all(state[k] == latest[k] for k in latest), "a key's value is not its latest, byte for byte"

    live = {
        decode_envelope(value).locator
        for _, value, headers in _raw_records(kafka, compacted)
        if value is not None and classify(value, headers).kind is RecordKind.ENVELOPE
    }
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribe": compacted,
        "redis.url": redis_server.url,
        "redis.prefix": compacted,
    }
    report = reconcile(spark, options, grace_seconds=0, delete=True)
    assert report.dangling == [] and report.failed == []
    stored = {locator for locator, _ in store.list_locators(compacted)}
    assert stored == live, f"{len(stored - live)} superseded payloads left, {len(live - stored)} live ones lost"
    assert len(report.deleted) == written - len(live) > 50  # 80 written, 8 live in the layout above


def test_prepare_topics_learns_each_cleanup_policy_ahead(kafka: KafkaService, compacted: str, topic: str) -> None:
    with HybridProducer({**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}) as producer:
        assert producer.prepare_topics([compacted, topic]) == {compacted: "compact", topic: "delete"}
        with pytest.raises(CompactedTopicError):  # known ahead: refused before anything is written
            producer.produce(compacted, b"x" * (3 * SEGMENT), key=b"k")
    off = {**kafka.producer_config(), "large.message.compaction.check": False}
    with HybridProducer(off) as producer:
        assert producer.prepare_topics([compacted]) == {compacted: None}


DENY_DESCRIBE_CONFIGS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    # resources without ACLs (the cluster, groups) stay open; topics get the two ACLs below
    "allow.everyone.if.no.acl.found": "true",
}


@pytest.fixture
def denying_kafka() -> Iterator[ApacheKafka]:
    """A broker of this test's own whose authorizer lets clients do anything with topics but describe their configs.

    All listeners are PLAINTEXT, so every client is ``User:ANONYMOUS``: ALLOW it ALL on every topic,
    DENY it DESCRIBE_CONFIGS on every topic (a DENY wins over an ALLOW).
    """
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    try:
        node = ApacheKafka(overrides=DENY_DESCRIBE_CONFIGS)
    except ServiceUnavailable as exc:
        pytest.fail(f"Apache Kafka is needed for the authorizer test: {exc.reason}")
    with node:
        admin = AdminClient(node.client_conf())
        acls = [
            AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", operation, kind)
            for operation, kind in (
                (AclOperation.ALL, AclPermissionType.ALLOW),
                (AclOperation.DESCRIBE_CONFIGS, AclPermissionType.DENY),
            )
        ]
        for future in admin.create_acls(acls, request_timeout=15).values():
            future.result(timeout=20)
        yield node


def _refusal(kafka: KafkaService, topic: str) -> str:
    """What the broker answers to a direct DescribeConfigs of ``topic`` (the error's name), "" if it answers."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]

    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = AdminClient(kafka.client_conf())
    try:
        admin.describe_configs([resource], request_timeout=10)[resource].result(timeout=11)
    except KafkaException as exc:
        return str(exc.args[0].name())
    return ""


@pytest.mark.requires("broker_faults")
def test_the_admin_client_is_opened_by_the_first_message_that_needs_it_and_a_real_refusal_degrades(
    denying_kafka: ApacheKafka, redis_client: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """No admin client at construction (issue 31); without DescribeConfigs the topic counts as not compacted.

    The refusal is Apache Kafka's own: its StandardAuthorizer denies DescribeConfigs on topics to this
    producer, which may still create, describe, write and read them.
    """
    from gateway.producer._compaction import AdminDescriber

    kafka = denying_kafka
    compacted = f"c-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(compacted, 1, COMPACT_FAST)
    deadline = time.monotonic() + 15  # the ACLs reach the authorizer through the metadata log
    while (refusal := _refusal(kafka, compacted)) == "" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert refusal == "TOPIC_AUTHORIZATION_FAILED", f"the broker did not refuse DescribeConfigs: {refusal!r}"

    connect = AdminDescriber._connect
    made: list[AdminDescriber] = []

    def counted(self: AdminDescriber) -> Any:
        """The real admin client, counted as it is made."""
        if self._admin is None:
            made.append(self)
        return connect(self)

    monkeypatch.setattr(AdminDescriber, "_connect", counted)
    store = RedisStore(redis_client, prefix=compacted)
    config = {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}
    big = bytes(range(256)) * (3 * SEGMENT // 256)
    with (
        caplog.at_level("WARNING", logger="gateway.producer._compaction"),
        HybridProducer(config, policy=SizeThresholdPolicy(store="redis"), stores={"redis": store}) as producer,
    ):
        producer.produce(compacted, b"small", key=b"k")
        assert producer.flush(30) == 0 and made == [], "no admin client for a producer that sends plain records"
        producer.produce(compacted, big, key=b"k2")  # asks, is refused: treated as not compacted, so chunked
        assert producer.flush(30) == 0 and len(made) == 1
        assert producer.metrics()["chunked.messages"] == 1 and producer.metrics()["reference.messages"] == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("TOPIC_AUTHORIZATION_FAILED" in w and "treated as not compacted" in w for w in warnings), warnings
    assert list(store.list_locators(compacted)) == []

    conf = {**kafka.consumer_config(), "enable.partition.eof": True}
    got: list[tuple[bytes | None, bytes | None]] = []
    with HybridConsumer(conf, stores={"redis": store}) as consumer:
        consumer.assign([TopicPartition(compacted, 0, 0)])
        for _ in range(50):
            msg = consumer.poll(10.0)
            assert msg is not None, "no end of partition within 10 s"
            if msg.error():
                break
            got.append((msg.key(), msg.value()))
    assert got == [(b"k", b"small"), (b"k2", big)]
