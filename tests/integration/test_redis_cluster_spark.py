"""Spark's reader and ``reconcile`` against payloads in a Redis Cluster.

The reader's ``redis.url`` names one node; the store sees a cluster there and reads the slotted
layout from every master. A payload lost with its master (what asynchronous replication allows)
must come back as an error row carrying the message's coordinates, never as wrong bytes, and
``reconcile`` must list orphans and dangling envelopes across all masters.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from gateway import HybridProducer
from gateway.spark import reconcile
from gateway.testing import KafkaService, RedisClusterServer
from stores import RedisStore
from tests.helpers import payload, sha

pytestmark = pytest.mark.spark


def _options(kafka: KafkaService, cluster: RedisClusterServer, topic: str, prefix: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribe": topic,
        "redis.url": f"redis://{cluster.startup_nodes[0]}/0",  # one node; the store finds the cluster
        "redis.prefix": prefix,
        "failOnDataLoss": "false",
    }


def test_reader_and_reconcile_on_a_redis_cluster(
    spark: Any, kafka: KafkaService, redis_cluster: RedisClusterServer, redis_cluster_client: Any
) -> None:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic, partitions=2)
    prefix = f"gw{uuid.uuid4().hex[:6]}"
    store = RedisStore(redis_cluster_client, prefix=prefix)
    producer = HybridProducer(kafka.producer_config(), stores={"redis": store})
    sent = {f"k{i}": payload(150_000 + i * 1000, seed=i) for i in range(24)}
    for key, value in sent.items():
        producer.produce(topic, value, key=key.encode(), route="reference:redis")
    assert producer.flush(60) == 0
    locators = {loc for loc, _ in store.list_locators(topic)}
    masters = {redis_cluster.master_of_key(loc.split("}")[0] + "}").port for loc in locators}
    assert len(locators) == 24 and len(masters) == 3, "the payloads should sit on every master"

    lost = sorted(locators)[0]
    store.delete(lost)  # as if its master died before a replica copied it
    orphan = store.put(topic, uuid.uuid4(), b"never announced", pending_since_ms=1)

    rows = spark.read.format("hybrid-kafka").options(**_options(kafka, redis_cluster, topic, prefix)).load().collect()
    assert len(rows) == 24
    broken = [r for r in rows if r["error"] is not None]
    assert len(broken) == 1 and broken[0]["value"] is None and "PayloadNotFoundError" in broken[0]["error"]
    assert broken[0]["route"] == "reference" and broken[0]["key"] is not None
    whole = {r["key"].decode(): sha(r["value"]) for r in rows if r["error"] is None}
    assert whole == {k: sha(v) for k, v in sent.items() if k != broken[0]["key"].decode()}, "never wrong bytes"

    report = reconcile(spark, _options(kafka, redis_cluster, topic, prefix), grace_seconds=0)
    assert [o.locator for o in report.orphans] == [orphan]
    assert [d.locator for d in report.dangling] == [lost]
    assert report.envelopes == 24
