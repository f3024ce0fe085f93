"""``gateway reconcile`` proves before it deletes, as ``gateway gc`` does (issue 39, points 2 and 3).

Before: the Spark scan read ``read_committed``, so it stopped at the last stable offset; the 4
payloads of a transaction open for longer than ``--grace``, and one written by reference after it,
were called orphans and deleted, and after the commit every reader failed on them. And the scan
read only the topics named, so the payload an envelope copied into ``source.A`` pointed at was
deleted once ``A``'s own records were gone. Run on Apache Kafka with a real redis-server and moto.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.gc.sweeper import EXIT_INCOMPLETE
from gateway.spark.reconcile import EXIT_SHARED_PREFIX
from gateway.testing import KafkaService, RedisServer, S3Server
from stores import RedisStore, S3Store
from tests.helpers import consume_all, payload, sha
from tests.kafkautil import read_partition

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]


def _sent(store: Any, topic: str) -> list[str]:
    return sorted(locator for locator, _ in store.list_locators(topic))


def _reconcile(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from gateway.cli import main

    code = main(["reconcile", "--grace", "0", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _deleted(report: str) -> list[str]:
    return sorted(line.split("deleted: ")[1].strip() for line in report.splitlines() if "deleted: " in line)


def _messages(kafka: KafkaService, stores: dict[str, Any], topic: str, want: int, **conf: Any) -> dict[bytes, str]:
    """What a default ``read_committed`` HybridConsumer delivers, every message whole (no error at all)."""
    config = {**kafka.consumer_config(None), "isolation.level": "read_committed", "enable.auto.commit": False}
    with HybridConsumer({**config, **conf}, stores=stores) as consumer:
        consumer.subscribe([topic])
        messages, errors = consume_all(consumer, want, timeout=60)
    assert errors == []
    return {m.key(): sha(m.value()) for m in messages}


@pytest.mark.requires("transactions")
def test_reconcile_keeps_the_payloads_of_an_open_transaction_and_deletes_only_the_true_orphan(
    spark: Any,
    kafka: KafkaService,
    topic: str,
    redis_server: RedisServer,
    redis_client: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's reproduction: a transaction open for longer than --grace with 4 payloads, and a
    non-transactional envelope after it (past the last stable offset). Before the fix ``--delete``
    deleted those 5 with the orphan and exited 0; after the commit the consumer got 5
    ``PayloadNotFoundError``. Now all 5 are undecided with gc's reason and exit status 4, the
    committed one stays, the orphan goes; after the commit all 6 are delivered and a second run
    finds nothing left to decide."""
    store = RedisStore(redis_client, prefix=f"rct{uuid.uuid4().hex[:6]}")
    stores = {"redis": store}
    args = ["--bootstrap", kafka.bootstrap_servers, "--topic", topic]
    args += ["--redis-url", redis_server.url, "--redis-prefix", store.prefix]
    sizes = {b"before": 1, b"open-0": 10, b"open-1": 11, b"open-2": 12, b"open-3": 13, b"after": 20}
    with HybridProducer(kafka.producer_config(), stores=stores) as plain:
        plain.produce(topic, payload(900_000, seed=1), key=b"before", route="reference:redis")
        assert plain.flush(30) == 0
    orphan = store.put(topic, uuid.uuid4(), b"no envelope points here")
    # open through the Spark job (the default 60 s timeout would let the broker abort it meanwhile)
    conf = {
        **kafka.producer_config(),
        "transactional.id": f"tx-{uuid.uuid4().hex[:8]}",
        "transaction.timeout.ms": 600_000,
    }
    policy = SizeThresholdPolicy(reference_above=500_000, store="redis")
    with HybridProducer(conf, policy=policy, stores=stores) as producer:
        producer.init_transactions(60)
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic, payload(900_000, seed=10 + i), key=b"open-%d" % i)
        assert producer.flush(30) == 0
        with HybridProducer(kafka.producer_config(), stores=stores) as plain:
            plain.produce(topic, payload(900_000, seed=20), key=b"after", route="reference:redis")
            assert plain.flush(30) == 0
        live = sorted(set(_sent(store, topic)) - {orphan})
        assert len(live) == 6
        time.sleep(0.01)  # --grace 0: written strictly before "now"

        code, out, err = _reconcile(capsys, *args, "--delete")
        assert code == EXIT_INCOMPLETE == 4, out + err
        assert _deleted(out) == [orphan], out
        assert out.count("a transaction there is still open") == 5, out
        assert "5 kept because nothing proved them live or dead" in err
        assert _sent(store, topic) == live

        producer.commit_transaction(60)
    got = _messages(kafka, stores, topic, 6)
    assert got == {key: sha(payload(900_000, seed=seed)) for key, seed in sizes.items()}

    code, out, err = _reconcile(capsys, *args, "--delete")
    assert code == 0 and "undecided" not in out and _deleted(out) == [], out + err
    assert _sent(store, topic) == live


@pytest.mark.requires("delete_records")
def test_reconcile_keeps_what_a_mirror_points_at_and_refuses_a_prefix_shared_with_a_topic_not_named(
    spark: Any,
    kafka: KafkaService,
    s3_server: S3Server,
    s3_client: Any,
    s3_bucket: str,
    s3_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An envelope copied into ``source.A`` (as MirrorMaker 2 does), then A's records deleted. Before
    the fix ``reconcile --topic A --delete`` deleted the payload the mirror points at. Named through
    the consumers' ``reference.topic.renames`` the mirror is scanned and the payload stays; not named,
    in a prefix that also holds objects written for ``source.A``, ``--delete`` deletes nothing and
    says which topic (exit 7)."""
    tag = uuid.uuid4().hex[:8]
    source, mirror = f"rcm-{tag}", f"source.rcm-{tag}"
    for name in (source, mirror):
        kafka.create_topic(name, partitions=1)
    store = S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix)
    stores = {"s3": store}
    if not s3_server.external:  # the CLI takes S3 credentials from the environment, as boto3 does
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    args = ["--bootstrap", kafka.bootstrap_servers, "--topic", source, "--s3-bucket", s3_bucket]
    args += ["--s3-prefix", s3_prefix, "--s3-region", s3_server.region]
    if s3_server.endpoint_url:
        args += ["--s3-endpoint", s3_server.endpoint_url]
    renames = ["--reference-topic-renames", "source.${topic}"]

    producer = HybridProducer(kafka.producer_config(), stores=stores)
    producer.produce(source, payload(50_000, seed=1), key=b"mirrored", route="reference:s3")
    assert producer.flush(30) == 0
    [record] = read_partition(kafka.consumer_config(), source, 0, 1)
    producer.inner.produce(mirror, value=record.value(), key=record.key(), headers=record.headers(), partition=0)
    assert producer.flush(30) == 0
    [mirrored] = _sent(store, source)
    for future in kafka.admin().delete_records([TopicPartition(source, 0, 1)]).values():
        future.result(30)
    time.sleep(0.01)

    code, out, err = _reconcile(capsys, *args, *renames, "--delete")
    assert code == 0, out + err
    assert f"mirrors {mirror} (reference.topic.renames) scanned with them" in out
    assert _deleted(out) == [] and "orphan:" not in out, out
    mirror_reader = {"reference.topic.renames": "source.${topic}"}
    assert _messages(kafka, stores, mirror, 1, **mirror_reader) == {b"mirrored": sha(payload(50_000, seed=1))}

    # the mirror topic also gets a message by reference of its own: its object shares the prefix
    producer.produce(mirror, payload(50_000, seed=2), key=b"direct", route="reference:s3")
    assert producer.flush(30) == 0
    producer.close()
    orphan = store.put(source, uuid.uuid4(), b"no envelope points here")
    time.sleep(0.01)
    code, out, err = _reconcile(capsys, *args, "--delete")
    assert code == EXIT_SHARED_PREFIX == 7, out + err
    assert f"the prefix is shared with topics not reconciled: {mirror} (1 objects)" in err, err
    assert _deleted(out) == [] and f"orphan: s3 {orphan}" in out, out
    assert _sent(store, source) == sorted([mirrored, orphan])

    code, out, err = _reconcile(capsys, *args, *renames, "--delete")
    assert code == 0 and _deleted(out) == [orphan], out + err
    assert _sent(store, source) == [mirrored]
    got = _messages(kafka, stores, mirror, 2, **mirror_reader)
    assert got == {b"mirrored": sha(payload(50_000, seed=1)), b"direct": sha(payload(50_000, seed=2))}
