"""Failover on a three-node Apache Kafka cluster: a partition leader dies in the middle of large messages.

Topics have three replicas and ``min.insync.replicas=2``; producers send with ``acks=all`` and
idempotence, the settings under which Kafka promises that an acknowledged record survives the loss
of its leader. Every acknowledged message must then reach a consumer group exactly once, whole and
byte-identical, whatever segments were retried across the failover, and no store write may be
rolled back whose envelope landed, nor any payload be left without one after gc.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.testing import ApacheKafkaCluster, RedisServer, ServiceUnavailable
from stores import RedisStore
from tests.faults import (
    Tally,
    consume,
    consumer_conf,
    envelope_locators,
    everything_delivered,
    produce,
    producer_conf,
    sweep_orphans,
)

pytestmark = pytest.mark.requires("broker_faults")


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[ApacheKafkaCluster]:
    """Three nodes for this module; each test leaves every node running again."""
    try:
        cluster = ApacheKafkaCluster(3)
    except ServiceUnavailable as exc:
        pytest.fail(f"Apache Kafka is needed for failover tests: {exc.reason}")
    with cluster:
        yield cluster


@pytest.fixture
def cluster(own_cluster: ApacheKafkaCluster) -> Iterator[ApacheKafkaCluster]:
    yield own_cluster
    for node in own_cluster.nodes:
        if not node.running:
            node.restart(own_cluster.start_timeout)


@pytest.fixture
def redis_store(redis_server: RedisServer) -> Iterator[RedisStore]:
    client = redis_server.client(socket_timeout=2)
    yield RedisStore(client, prefix=f"fo{uuid.uuid4().hex[:6]}")
    client.close()


def replicated_topic(cluster: ApacheKafkaCluster) -> str:
    name = f"fo-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(name, partitions=1)
    cluster.await_full_isr(name, [0])
    return name


def dangling(cluster: ApacheKafkaCluster, topic: str, stores: dict[str, Any]) -> int:
    """Envelopes in the topic whose payload is gone: a rollback of something that was written."""
    present = {locator for store in stores.values() for locator, _ in store.list_locators(topic)}
    return sum(1 for _, locator in envelope_locators(cluster, topic) if locator not in present)


@pytest.mark.parametrize("route", ["chunked", "reference"])
def test_leader_killed_mid_send(cluster: ApacheKafkaCluster, redis_store: RedisStore, route: str) -> None:
    topic = replicated_topic(cluster)
    leader = cluster.leader(topic, 0)
    tally = Tally(f"3 brokers: partition leader SIGKILLed during {route} produce (no restart)")
    stores: dict[str, Any] = {"redis": redis_store}
    policy = SizeThresholdPolicy(reference_above=500_000 if route == "reference" else 10**12, store="redis")
    producer = HybridProducer(producer_conf(cluster), policy=policy, stores=stores)
    produce(tally, producer, topic, 24, fault_at=8, fault=lambda: cluster.kill(leader))
    new_leader = cluster.leader(topic, 0)
    assert new_leader not in (leader, -1), f"leadership did not move from node {leader}"
    consumer = HybridConsumer(consumer_conf(cluster, f"g-{uuid.uuid4().hex[:8]}"), stores=stores)
    consumer.subscribe([topic])
    consume(tally, consumer, until=everything_delivered(tally))
    consumer.close()
    assert dangling(cluster, topic, stores) == 0, "a payload whose envelope landed was rolled back"
    sweep_orphans(tally, cluster, topic, stores)
    tally.note = f"leader moved from node {leader} to {new_leader}"
    tally.check()
    assert len(tally.acknowledged) == 24, tally.failed
    assert tally.duplicated == 0, tally.row()


def test_broker_restarted_while_group_reads_large_messages(cluster: ApacheKafkaCluster) -> None:
    topic = replicated_topic(cluster)
    tally = Tally("3 brokers: partition leader SIGKILLed and restarted while a group reads chunked messages")
    producer = HybridProducer(producer_conf(cluster))
    produce(tally, producer, topic, 24)
    assert len(tally.acknowledged) == 24, tally.failed
    leader = cluster.leader(topic, 0)

    def fault(taken: int) -> None:
        if taken == 8:
            cluster.kill(leader)
            time.sleep(2)
            cluster.restart(leader)

    consumer = HybridConsumer(consumer_conf(cluster, f"g-{uuid.uuid4().hex[:8]}"))
    consumer.subscribe([topic])
    consume(tally, consumer, until=everything_delivered(tally), on_each=fault)
    consumer.close()
    tally.note = f"node {leader} killed after 8 messages and restarted 2 s later"
    tally.check()  # at least once: a commit refused while the group moved may be re-read
