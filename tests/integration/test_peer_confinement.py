"""Peers' pointers obey our envelopes' confinement: no object our producer wrote is served through one.

A pointer in bakdata's (header and byte flag), kaf-s3's or AWS's format names a bucket and key, so
anyone who can write to topic ``other-b`` can name the object our producer wrote for ``secret-a``,
in the very bucket the consumer reads ours from. Before, that object was delivered as ``other-b``'s
value (a sealed one as its ciphertext), while the envelope copied into ``other-b`` was refused. Now
the reference rules judge the object's metadata from the GET's own response, before its body is
read: in another topic it is :class:`LocatorTopicError` (as its envelope gets), in its own topic or
a mirror :class:`EnvelopePayloadError` (only the envelope says whether it is sealed), each carrying
the record, and the record after it is delivered. The same holds in the Spark source, whose
``failOnDataLoss`` error names topic, partition and offset. Real moto S3, the pointers built as each
format describes them (a peer's own writer never points at our objects).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.encryption import LocalKeyRing
from gateway.errors import EnvelopePayloadError, GatewayError, LocatorTopicError
from gateway.protocol.peers import BAKDATA_VALUE_HEADER
from gateway.testing import KafkaService
from gateway.testing.s3_server import S3Server
from stores import S3Store
from tests.helpers import consume_all
from tests.kafkautil import produce_records, read_partition

RING = LocalKeyRing({"k1": bytes(range(32))}, "k1")
AWS_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"
FORMATS = "bakdata,kafs3,aws"
CLEAR = b"secret-a's plaintext " * 100
SEALED = b"secret-a's sealed plaintext " * 100


@dataclass(frozen=True)
class Written:
    """Topic ``secret`` holds an envelope of a clear and one of a sealed payload, both in ``bucket`` under ``gw/``."""

    bucket: str
    secret: str
    clear_key: str
    sealed_key: str


def pointers(bucket: str, key: str) -> list[tuple[str, bytes, list[tuple[str, bytes]] | None]]:
    """``(format, value, headers)`` of a pointer to ``s3://bucket/key`` in each peer format, as each writes them."""
    uri = f"s3://{bucket}/{key}".encode()
    return [
        ("aws", json.dumps([AWS_CLASS, {"s3BucketName": bucket, "s3Key": key}]).encode(), None),
        ("kafs3", json.dumps({"s3_bucket": bucket, "s3_key": key}).encode(), None),
        ("bakdata-header", uri, [(BAKDATA_VALUE_HEADER, b"\x01")]),
        ("bakdata-flag", b"\x01" + uri, None),
    ]


def produce_pointers(kafka: KafkaService, topic: str, bucket: str, keys: list[str]) -> int:
    """Every format's pointer to each key, then ``after``; how many pointers."""
    records = [
        {"topic": topic, "partition": 0, "key": fmt.encode(), "value": value, "headers": headers}
        for key in keys
        for fmt, value, headers in pointers(bucket, key)
    ]
    produce_records(kafka.producer_config(), [*records, {"topic": topic, "partition": 0, "value": b"after"}])
    return len(records)


def new_topic(kafka: KafkaService, name: str) -> str:
    kafka.create_topic(name, partitions=1)
    return name


@pytest.fixture
def written(kafka: KafkaService, s3_server: S3Server, s3_client: Any) -> Iterator[Written]:
    bucket = s3_server.create_bucket(f"confine-{uuid.uuid4().hex[:12]}")
    secret = new_topic(kafka, f"secret-a-{uuid.uuid4().hex[:8]}")
    keys = []
    for value, conf, provider in ((CLEAR, {}, None), (SEALED, {"reference.encryption": "aes256-gcm"}, RING)):
        store = S3Store(s3_server.client(), bucket=bucket, prefix="gw/", name="s3")
        before = {
            o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket, Prefix=f"gw/{secret}/").get("Contents", [])
        }
        with HybridProducer(
            {**kafka.producer_config(), **conf},
            policy=SizeThresholdPolicy(reference_above=1000, store="s3"),
            stores={"s3": store},
            key_provider=provider,
        ) as producer:
            producer.produce(secret, value, key=b"ours", partition=0)
            assert producer.flush(30) == 0
        listed = s3_client.list_objects_v2(Bucket=bucket, Prefix=f"gw/{secret}/").get("Contents", [])
        (key,) = {o["Key"] for o in listed} - before
        keys.append(key)
    assert s3_client.get_object(Bucket=bucket, Key=keys[1])["Body"].read() != SEALED  # sealed in the store
    yield Written(bucket, secret, *keys)
    kafka.delete_topic(secret)


def own_store(s3_server: S3Server, written: Written) -> S3Store:
    return S3Store(s3_server.client(), bucket=written.bucket, prefix="gw/", name="s3")


def read(
    kafka: KafkaService, topic: str, stores: dict[str, Any], want: int, **config: Any
) -> tuple[list[Any], list[GatewayError]]:
    conf = kafka.consumer_config(**{"large.message.peer.formats": FORMATS, **config})
    consumer = HybridConsumer(conf, stores=stores, key_provider=RING)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        return consume_all(consumer, want, timeout=60)
    finally:
        consumer.close()


@pytest.mark.parametrize("store_prefix", ["gw/", ""], ids=["own-store", "peer-store-over-the-bucket"])
def test_a_pointer_in_another_topic_to_our_object_is_a_topic_error_with_its_record(
    kafka: KafkaService, s3_server: S3Server, s3_client: Any, written: Written, store_prefix: str
) -> None:
    """aws, kaf-s3 and bakdata (header and byte flag) pointers in ``other-b`` to the clear and the sealed
    object written for ``secret-a``: eight ``LocatorTopicError`` carrying their records, whether the consumer
    reads through its own store or a store over the whole bucket; a peer's own object beside them, even one
    named like ours, and the record after them are delivered."""
    other = new_topic(kafka, f"other-b-{uuid.uuid4().hex[:8]}")
    look_alike = f"gw/{written.secret}/{uuid.uuid4()}"  # our layout, but written by someone else: no metadata
    s3_client.put_object(Bucket=written.bucket, Key=look_alike, Body=b"a peer's object")
    try:
        count = produce_pointers(kafka, other, written.bucket, [written.clear_key, written.sealed_key, look_alike])
        store = S3Store(s3_server.client(), bucket=written.bucket, prefix=store_prefix, name="s3")
        got, errors = read(kafka, other, {"s3": store}, count + 1)
    finally:
        kafka.delete_topic(other)
    assert [type(e) for e in errors] == [LocatorTopicError] * 8, errors
    assert [e.kafka_message.offset() for e in errors if e.kafka_message is not None] == list(range(8))
    assert [e.kafka_message.key() for e in errors if e.kafka_message is not None][:4] == [
        b"aws",
        b"kafs3",
        b"bakdata-header",
        b"bakdata-flag",
    ]
    assert all(f"wrote for topic {written.secret!r}" in str(e) for e in errors)
    assert [(m.offset(), m.value()) for m in got] == [(8 + i, b"a peer's object") for i in range(4)] + [(12, b"after")]
    assert not any(CLEAR in (m.value() or b"") for m in got)


def test_a_pointer_to_our_object_in_its_own_topic_is_refused_and_the_envelopes_still_open(
    kafka: KafkaService, s3_server: S3Server, written: Written
) -> None:
    """In ``secret-a`` itself, where the binding allows the object: the pointers to the sealed payload (and to
    the clear one) are ``EnvelopePayloadError``, never its ciphertext; the envelopes before them open."""
    count = produce_pointers(kafka, written.secret, written.bucket, [written.sealed_key, written.clear_key])
    got, errors = read(kafka, written.secret, {"s3": own_store(s3_server, written)}, 2 + count + 1)
    assert [type(e) for e in errors] == [EnvelopePayloadError] * 8, errors
    assert [e.kafka_message.offset() for e in errors if e.kafka_message is not None] == list(range(2, 10))
    assert all("read through its envelope only" in str(e) for e in errors)
    assert [(m.offset(), m.value()) for m in got] == [(0, CLEAR), (1, SEALED), (10, b"after")]


def test_renames_let_a_mirror_serve_envelopes_and_type_its_pointers_by_the_binding(
    kafka: KafkaService, s3_server: S3Server, written: Written
) -> None:
    """MirrorMaker 2's ``source.secret-a``: with the rename named, the copied envelope is served and a pointer
    to the same object is ``EnvelopePayloadError`` (the binding allows it, the envelope rule does not);
    without it, both are ``LocatorTopicError``."""
    mirror = new_topic(kafka, f"source.{written.secret}")
    try:
        (raw,) = read_partition(kafka.consumer_config(), written.secret, 0, 1)
        copy = {"topic": mirror, "partition": 0, "key": raw.key(), "value": raw.value(), "headers": raw.headers()}
        produce_records(kafka.producer_config(), [copy])
        count = produce_pointers(kafka, mirror, written.bucket, [written.clear_key])
        stores = {"s3": own_store(s3_server, written)}
        served, pointer_errors = read(
            kafka, mirror, stores, 1 + count + 1, **{"reference.topic.renames": "source.${topic}"}
        )
        refused, topic_errors = read(kafka, mirror, stores, 1 + count + 1)
    finally:
        kafka.delete_topic(mirror)
    assert [(m.offset(), m.value()) for m in served] == [(0, CLEAR), (5, b"after")]
    assert [type(e) for e in pointer_errors] == [EnvelopePayloadError] * 4
    assert [(m.offset(), m.value()) for m in refused] == [(5, b"after")]
    assert [type(e) for e in topic_errors] == [LocatorTopicError] * 5


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_the_spark_source_refuses_pointers_to_our_objects_and_names_topic_partition_and_offset(
    spark: Any, kafka: KafkaService, s3_server: S3Server, written: Written
) -> None:
    """The Spark source shares the consumer's check: error rows with ``failOnDataLoss=false`` (the topic error in
    ``other-b``, the envelope error in ``secret-a``), never secret-a's plaintext or ciphertext; with it, a
    ``DataLossError`` naming ``other-b[0]`` and the offset."""
    other = new_topic(kafka, f"other-b-{uuid.uuid4().hex[:8]}")
    try:
        count = produce_pointers(kafka, other, written.bucket, [written.clear_key, written.sealed_key])
        produce_pointers(kafka, written.secret, written.bucket, [written.sealed_key])
        options = {
            "kafka.bootstrap.servers": kafka.bootstrap_servers,
            "s3.endpoint": s3_server.endpoint_url,
            "s3.access.key": "testing",
            "s3.secret.key": "testing",
            "s3.region": "us-east-1",
            "s3.bucket": written.bucket,
            "s3.prefix": "gw/",
            "large.message.peer.formats": FORMATS,
            "peer.s3.buckets": f"{written.bucket}/",
        }

        def rows(topic: str, **more: str) -> list[Any]:
            frame = spark.read.format("hybrid-kafka").options(**options, subscribe=topic, **more).load()
            return frame.orderBy("offset").select("offset", "key", "value", "error").collect()  # type: ignore[no-any-return]

        across = rows(other, failOnDataLoss="false")
        own = rows(written.secret, failOnDataLoss="false")
        with pytest.raises(
            Exception, match=rf"at {re.escape(other)}\[0\] offset 0 cannot be delivered.*LocatorTopicError"
        ):
            rows(other)
    finally:
        kafka.delete_topic(other)
    assert [r.offset for r in across] == list(range(count + 1))
    assert all(r.value is None and "LocatorTopicError" in r.error for r in across[:count]), across
    assert bytes(across[count].value) == b"after" and across[count].error is None
    pointer_rows = [r for r in own if r.key is not None and bytes(r.key) != b"ours"]
    assert len(pointer_rows) == 4
    assert all(r.value is None and "EnvelopePayloadError" in r.error for r in pointer_rows), pointer_rows
