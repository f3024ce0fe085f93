"""The ``hybrid-kafka`` sink: rows from 100 B to 30 MB written by Spark, read back byte-identical.

Read back twice, by ``HybridConsumer`` and by the ``hybrid-kafka`` reader; a streaming write goes
topic to topic; a write that fails leaves nothing in the stores that gc (against Kafka) cannot
account for.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway import HybridConsumer
from gateway.spark.options import OptionError
from gateway.spark.sink import parse_sink_options
from gateway.testing import KafkaService, RedisServer, S3Server
from stores import RedisStore, S3Store
from tests.faults import Tally, envelope_locators, sweep_orphans
from tests.helpers import consume_all, payload, sha

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

SIZES = (100, 10_000, 700_000, 1_500_000, 5_000_000, 30_000_000)
"""Plain, plain, chunked, chunked, reference, reference (segment 500 000, reference above 2 MB)."""


@pytest.fixture
def sink_stores(redis_server: RedisServer, s3_server: S3Server) -> tuple[dict[str, Any], dict[str, str]]:
    tag = uuid.uuid4().hex[:8]
    bucket = s3_server.bucket or s3_server.create_bucket(f"gw-sink-{tag}")
    stores = {
        "redis": RedisStore(redis_server.client(), prefix=f"gwsink{tag}"),
        "s3": S3Store(s3_server.client(), bucket=bucket, prefix=f"gw-sink-{tag}/"),
    }
    options = {"redis.url": redis_server.url, "redis.prefix": f"gwsink{tag}", "s3.bucket": bucket}
    options["s3.prefix"] = f"gw-sink-{tag}/"
    options["s3.region"] = s3_server.region
    if s3_server.endpoint_url:
        options["s3.endpoint"] = s3_server.endpoint_url
    if not s3_server.external:
        options.update({"s3.access.key": "testing", "s3.secret.key": "testing"})
    return stores, options


def _frame(spark: Any, topic: str | None = None) -> Any:
    rows = [(f"k{i}".encode(), payload(size, seed=i), [("size", str(size).encode())]) for i, size in enumerate(SIZES)]
    frame = spark.createDataFrame(rows, "key binary, value binary, headers array<struct<key:string,value:binary>>")
    return frame if topic is None else frame.selectExpr(f"'{topic}' AS topic", "*")


def _read_back(kafka: KafkaService, topic: str, stores: dict[str, Any], count: int) -> dict[bytes, tuple[str, Any]]:
    consumer = HybridConsumer({**kafka.consumer_config(), "auto.offset.reset": "earliest"}, stores=stores)
    try:
        consumer.subscribe([topic])
        messages, errors = consume_all(consumer, count, timeout=120)
    finally:
        consumer.close()
    assert errors == []
    return {m.key(): (sha(m.value()), m.headers()) for m in messages}


def test_rows_of_every_size_go_their_route_and_read_back_whole(
    spark: Any, kafka: KafkaService, sink_stores: tuple[dict[str, Any], dict[str, str]]
) -> None:
    stores, store_options = sink_stores
    topic = f"sink-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    (
        _frame(spark)
        .write.format("hybrid-kafka")
        .mode("append")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", topic)
        .option("max.message.segment.bytes", "500000")
        .option("reference.above", "2000000")
        .option("reference.store", "s3")
        .options(**store_options)
        .save()
    )
    expected = {f"k{i}".encode(): sha(payload(size, seed=i)) for i, size in enumerate(SIZES)}
    got = _read_back(kafka, topic, stores, len(SIZES))
    assert {k: v[0] for k, v in got.items()} == expected
    assert all(("size", str(SIZES[int(k[1:])]).encode()) in (h or []) for k, (_, h) in got.items())
    frame = (
        spark.read.format("hybrid-kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .options(**store_options)
        .load()
    )
    rows = frame.select("key", "value", "route").collect()
    assert {bytes(r["key"]): sha(bytes(r["value"])) for r in rows} == expected
    assert sorted(r["route"] for r in rows) == ["chunked"] * 2 + ["plain"] * 2 + ["reference"] * 2
    assert len(list(stores["s3"].list_locators(topic))) == 2


def test_a_stream_writes_topic_to_topic(
    spark: Any, kafka: KafkaService, sink_stores: tuple[dict[str, Any], dict[str, str]], tmp_path: Path
) -> None:
    stores, store_options = sink_stores
    source, target = f"sink-in-{uuid.uuid4().hex[:8]}", f"sink-out-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(source, partitions=2)
    kafka.create_topic(target, partitions=2)
    # includeHeaders goes to the reader (the headers column) and to the sink, which takes it as Spark's does
    common = {"kafka.bootstrap.servers": kafka.bootstrap_servers, **store_options, "includeHeaders": "true"}
    writes = {"max.message.segment.bytes": "500000", "reference.above": "2000000", "reference.store": "redis"}
    _frame(spark).write.format("hybrid-kafka").mode("append").options(**common, **writes).option("topic", source).save()
    query = (
        spark.readStream.format("hybrid-kafka")
        .options(**common)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value", "headers")
        .writeStream.format("hybrid-kafka")
        .options(**common, **writes)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    expected = {f"k{i}".encode(): sha(payload(size, seed=i)) for i, size in enumerate(SIZES)}
    assert {k: v[0] for k, v in _read_back(kafka, target, stores, len(SIZES)).items()} == expected


def test_a_failed_write_leaves_nothing_gc_cannot_account_for(
    spark: Any, kafka: KafkaService, sink_stores: tuple[dict[str, Any], dict[str, str]]
) -> None:
    """Every row by reference; one row names a partition the topic lacks, so its task fails."""
    stores, store_options = sink_stores
    topic = f"sink-fail-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    rows = [(f"k{i}".encode(), payload(50_000, seed=i), 9 if i == 6 else i % 2) for i in range(10)]
    frame = spark.createDataFrame(rows, "key binary, value binary, partition int").coalesce(1)
    writer = (
        frame.write.format("hybrid-kafka")
        .mode("append")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("kafka.message.timeout.ms", "5000")
        .option("topic", topic)
        .option("reference.above", "0")
        .option("reference.store", "redis")
        .options(**store_options)
    )
    with pytest.raises(Exception, match=r"not delivered|Unknown partition|UNKNOWN_PARTITION"):
        writer.save()
    tally = Tally("spark sink task failure")
    sweep_orphans(tally, kafka, topic, {"redis": stores["redis"]})
    assert tally.orphaned == 0
    written = {locator for locator, _ in stores["redis"].list_locators(topic)}
    assert written == {locator for _, locator in envelope_locators(kafka, topic)}
    # the rows before the refused one are delivered; those after it too when the refusal came late (delivery report)
    assert 6 <= len(written) <= 9


def test_sink_options_are_checked_before_any_task(kafka: KafkaService) -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"}
    with pytest.raises(OptionError, match=r"unknown option subscribe for hybrid-kafka writes"):
        parse_sink_options({**base, "subscribe": "t"})
    with pytest.raises(OptionError, match=r"needs reference\.store"):
        parse_sink_options({**base, "reference.above": "10", "redis.url": "redis://x", "s3.bucket": "b"})
    one_store = parse_sink_options({**base, "reference.above": "10", "redis.url": "redis://x"})
    assert one_store.policy().store == "redis"


def test_a_task_killed_mid_write_leaves_nothing_gc_cannot_account_for(
    spark: Any, kafka: KafkaService, sink_stores: tuple[dict[str, Any], dict[str, str]]
) -> None:
    """A Python worker of the writing task dies (``os._exit``) half-way through its rows."""
    from pyspark.sql.functions import col, udf

    stores, store_options = sink_stores
    topic = f"sink-kill-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)

    def die_at_row_five(key: bytes) -> bytes:
        if key == b"k5":
            import os

            os._exit(3)
        return key

    rows = [(f"k{i}".encode(), payload(200_000, seed=i)) for i in range(10)]
    frame = spark.createDataFrame(rows, "key binary, value binary").coalesce(1)
    frame = frame.withColumn("key", udf(die_at_row_five, "binary")(col("key")))
    with pytest.raises(Exception):  # noqa: B017 - whatever Spark wraps the dead worker in
        (
            frame.write.format("hybrid-kafka")
            .mode("append")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("topic", topic)
            .option("reference.above", "0")
            .option("reference.store", "redis")
            .options(**store_options)
            .save()
        )
    tally = Tally("spark sink task killed")
    sweep_orphans(tally, kafka, topic, {"redis": stores["redis"]})
    assert tally.orphaned == 0
    written = {locator for locator, _ in stores["redis"].list_locators(topic)}
    assert written == {locator for _, locator in envelope_locators(kafka, topic)}
    assert len(written) <= 5


def test_save_without_a_mode_appends_as_sparks_kafka_sink_does(spark: Any, kafka: KafkaService, topic: str) -> None:
    """The API's own example: ``df.write.format("hybrid-kafka")...save()``, with no ``mode``."""
    frame = spark.createDataFrame([(b"a", b"1"), (b"b", b"2")], "key binary, value binary")
    for _ in range(2):
        frame.write.format("hybrid-kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers).option(
            "topic", topic
        ).save()
    consumer = HybridConsumer({**kafka.consumer_config(), "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        messages, errors = consume_all(consumer, 4, timeout=60)
    finally:
        consumer.close()
    assert errors == [] and sorted(m.key() for m in messages) == [b"a", b"a", b"b", b"b"]
    with pytest.raises(Exception, match="ErrorIfExists"):
        frame.write.format("hybrid-kafka").mode("error").option("topic", topic).save()
    with pytest.raises(Exception, match="OptionError: hybrid-kafka cannot overwrite a topic"):
        frame.write.format("hybrid-kafka").mode("overwrite").option("topic", topic).save()
