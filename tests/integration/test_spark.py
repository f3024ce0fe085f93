"""The ``hybrid-kafka`` Spark source against HybridConsumer on the same topic, and ``gateway reconcile``.

One SparkSession (local[2], the ``spark`` fixture in conftest.py) serves the whole run. The mixed topic is
built once: 1 000 logical messages over 4 partitions (plain, chunked V2 and header-only V3,
interleaved chunked, incomplete, Redis and S3 references), under 3 MiB per partition because the
embedded cluster keeps only 5 MiB per partition.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from gateway import HybridConsumer, HybridProducer
from gateway.errors import PayloadNotFoundError
from gateway.protocol import SAFE_OFFSET_HEADER, split
from gateway.protocol.envelope import Envelope, encode_envelope, envelope_header
from gateway.spark.options import parse_options
from gateway.spark.source import plan_batch
from gateway.testing import KafkaService, RedisServer, S3Server
from stores import RedisStore, S3Store
from tests.helpers import sha_or_none
from tests.kafkautil import read_partition

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

PARTITIONS = 4
PER_PARTITION = 250
GAP = 100  # message.assembler.expiration.offset.gap, for the consumer and the source alike
SEGMENT = 16_000
RANGE_RECORDS = 40  # maxRecordsPerPartition: many ranges, so chunked messages straddle boundaries


# -- session and services ------------------------------------------------------------------------


@dataclass
class Stores:
    redis: RedisStore
    s3: S3Store
    options: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return {"redis": self.redis, "s3": self.s3}


@pytest.fixture(scope="module")
def stores(redis_server: RedisServer, s3_server: S3Server) -> Iterator[Stores]:
    tag = uuid.uuid4().hex[:8]
    bucket = s3_server.bucket or s3_server.create_bucket(f"gw-spark-{tag}")
    prefix = f"gw-spark-{tag}/"
    redis_store = RedisStore(redis_server.client(), prefix=f"gwspark{tag}")
    s3_store = S3Store(s3_server.client(), bucket=bucket, prefix=prefix)
    options = {
        "redis.url": redis_server.url,
        "redis.prefix": redis_store.prefix,
        "s3.bucket": bucket,
        "s3.prefix": prefix,
        "s3.region": s3_server.region,
    }
    if s3_server.endpoint_url:
        options["s3.endpoint"] = s3_server.endpoint_url
    if not s3_server.external:
        options.update({"s3.access.key": "testing", "s3.secret.key": "testing"})
    yield Stores(redis_store, s3_store, options)


@pytest.fixture
def own(stores: Stores) -> Stores:
    """The module's servers under prefixes of this test's own: ``reconcile --delete`` refuses in a prefix
    that holds objects of topics it was not told about (the mixed topic's, the other tests')."""
    tag = uuid.uuid4().hex[:8]
    redis_store = RedisStore(stores.redis.client, prefix=f"gwrec{tag}")
    s3_store = S3Store(stores.s3.client, bucket=stores.s3.bucket, prefix=f"gw-rec-{tag}/")
    return Stores(
        redis_store, s3_store, {**stores.options, "redis.prefix": redis_store.prefix, "s3.prefix": s3_store.prefix}
    )


# -- the mixed topic -----------------------------------------------------------------------------


@dataclass
class Mixed:
    topic: str
    bootstrap: str
    produced: Counter[str]
    delivered: int  # logical messages HybridConsumer must hand out (incomplete ones excluded)


def _raw(producer: HybridProducer, topic: str, partition: int, records: list[Any]) -> None:
    for r in records:
        producer.inner.produce(
            topic,
            value=None if r.value is None else bytes(r.value),
            key=r.key,
            partition=partition,
            headers=r.headers,
            timestamp=r.timestamp or 0,
        )


@pytest.fixture(scope="module")
def mixed(kafka: KafkaService, stores: Stores) -> Mixed:
    topic = f"spark-mixed-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    producer = HybridProducer(
        {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}, stores=stores.as_dict()
    )
    rng = random.Random(20261122)
    produced: Counter[str] = Counter()
    # 246 draws, 250 messages: each "pair" is two interleaved chunked messages
    kinds = (
        ["plain"] * 158
        + ["chunked"] * 30
        + ["v3"] * 8
        + ["redis"] * 30
        + ["s3"] * 12
        + ["pair"] * 4
        + ["incomplete"] * 3
        + ["tombstone"] * 1
    )
    for partition in range(PARTITIONS):
        order = list(kinds)
        rng.shuffle(order)
        for i, kind in enumerate(order):
            key = f"p{partition}-{i}".encode()
            headers = [("app", f"{kind}-{i}".encode())] if i % 3 else None
            if kind == "plain":
                producer.produce(
                    topic, rng.randbytes(rng.randint(10, 3000)), key, partition, headers=headers, route="plain"
                )
            elif kind == "tombstone":
                producer.produce(topic, None, key, partition, route="plain")
            elif kind == "chunked":
                producer.produce(
                    topic, rng.randbytes(rng.randint(20_000, 90_000)), key, partition, headers=headers, route="chunked"
                )
            elif kind == "v3":  # LinkedIn's header-only segments, as li.record.header.enable writes them
                value = rng.randbytes(rng.randint(20_000, 90_000))
                _raw(
                    producer,
                    topic,
                    partition,
                    split(topic, partition, None, uuid.uuid4(), key, value, SEGMENT, headers, header_only=True),
                )
            elif kind in ("redis", "s3"):
                producer.produce(
                    topic,
                    rng.randbytes(rng.randint(500, 30_000)),
                    key,
                    partition,
                    headers=headers,
                    route=f"reference:{kind}",
                )
            elif kind == "pair":  # two messages whose segments alternate
                first = split(topic, partition, None, uuid.uuid4(), key + b"a", rng.randbytes(35_000), SEGMENT)
                second = split(topic, partition, None, uuid.uuid4(), key + b"b", rng.randbytes(40_000), SEGMENT)
                mixed_records = [r for pair in zip(first, second, strict=False) for r in pair]
                mixed_records += first[len(second) :] + second[len(first) :]
                _raw(producer, topic, partition, mixed_records)
                produced["chunked"] += 1
                kind = "chunked"
            elif kind == "incomplete":  # the last segment never comes
                segments = split(topic, partition, None, uuid.uuid4(), key, rng.randbytes(30_000), SEGMENT)
                _raw(producer, topic, partition, segments[:-1])
            produced["chunked" if kind == "v3" else kind] += 1
            producer.poll(0)
    assert producer.flush(60) == 0
    total = sum(produced.values())
    assert total == PARTITIONS * PER_PARTITION, produced
    return Mixed(topic, kafka.bootstrap_servers, produced, total - produced["incomplete"])


def _normal_headers(headers: Any) -> tuple[tuple[str, bytes | None], ...]:
    """Headers as a tuple, without the ``_so`` HybridConsumer appends (the source leaves it out on purpose)."""
    out = [(k, v) for k, v in (headers or ()) if k != SAFE_OFFSET_HEADER]
    return tuple(out)


Row = tuple[int, int, str | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


@pytest.fixture(scope="module")
def consumer_view(kafka: KafkaService, mixed: Mixed, stores: Stores) -> set[Row]:
    """What HybridConsumer hands out for the whole topic: (partition, offset, sha256, key, headers, ts)."""
    consumer = HybridConsumer(
        kafka.consumer_config(**{"message.assembler.expiration.offset.gap": GAP, "enable.auto.commit": False}),
        stores=stores.as_dict(),
    )
    consumer.assign([TopicPartition(mixed.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: list[Row] = []
    deadline = time.monotonic() + 120
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if len(got) >= mixed.delivered:
                    quiet_until = quiet_until or time.monotonic() + 1.5
                    if time.monotonic() > quiet_until:
                        break
                continue
            assert msg.error() is None, msg.error()
            got.append(
                (
                    msg.partition(),
                    msg.offset(),
                    sha_or_none(msg.value()),
                    msg.key(),
                    _normal_headers(msg.headers()),
                    msg.timestamp()[1],
                )
            )
    finally:
        consumer.close()
    assert len(got) == mixed.delivered
    assert len(set(got)) == len(got)
    return set(got)


def _source_options(mixed: Mixed, stores: Stores, **extra: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": mixed.bootstrap,
        "subscribe": mixed.topic,
        "message.assembler.expiration.offset.gap": str(GAP),
        "includeHeaders": "true",
        **stores.options,
        **extra,
    }


def _rows(frame: Any) -> list[Any]:
    from pyspark.sql import functions as F

    return frame.select(
        "partition",
        "offset",
        "value",
        "key",
        "headers",
        F.expr("unix_millis(timestamp)").alias("ts"),
        "route",
        "startingOffset",
        "error",
    ).collect()


def _view(rows: list[Any]) -> list[Row]:
    return [
        (
            r["partition"],
            r["offset"],
            sha_or_none(r["value"]),
            r["key"],
            tuple((h["key"], h["value"]) for h in (r["headers"] or ())),
            r["ts"],
        )
        for r in rows
    ]


# -- batch ---------------------------------------------------------------------------------------


def test_batch_read_gives_exactly_what_the_consumer_gives(
    spark: Any, mixed: Mixed, stores: Stores, consumer_view: set[Row]
) -> None:
    options = _source_options(mixed, stores, maxRecordsPerPartition=str(RANGE_RECORDS))
    started = time.monotonic()
    rows = _rows(spark.read.format("hybrid-kafka").options(**options).load())
    elapsed = time.monotonic() - started
    view = _view(rows)
    assert len(view) == len(set(view)), "a message was emitted twice"
    assert set(view) == consumer_view
    assert all(r["error"] is None for r in rows)
    routes = Counter(r["route"] for r in rows)
    assert routes == {
        "plain": mixed.produced["plain"] + mixed.produced["tombstone"],
        "chunked": mixed.produced["chunked"],
        "reference": mixed.produced["redis"] + mixed.produced["s3"],
    }
    for r in rows:
        assert r["startingOffset"] == r["offset"] if r["route"] != "chunked" else r["startingOffset"] <= r["offset"]
    # the test means something only if messages really cross range boundaries
    ranges = plan_batch(parse_options(options, streaming=False))
    assert len(ranges) >= PARTITIONS * 5
    starts = {(g.partition, g.from_offset) for g in ranges}
    crossing = [
        r
        for r in rows
        if r["route"] == "chunked"
        and any(p == r["partition"] and r["startingOffset"] < s <= r["offset"] for p, s in starts)
    ]
    assert len(crossing) >= 8, f"only {len(crossing)} chunked messages straddle a range boundary"
    print(
        f"\nbatch read: {len(rows)} rows in {len(ranges)} ranges, {len(crossing)} messages across boundaries, "
        f"{elapsed:.1f}s"
    )


def test_batch_read_without_splitting_and_with_explicit_offsets(
    spark: Any, mixed: Mixed, stores: Stores, consumer_view: set[Row]
) -> None:
    whole = _view(_rows(spark.read.format("hybrid-kafka").options(**_source_options(mixed, stores)).load()))
    assert set(whole) == consumer_view and len(whole) == len(consumer_view)
    # a window in the middle of partition 1: exactly the consumer's messages that complete inside it
    inside = sorted(o for p, o, *_ in consumer_view if p == 1)
    lo, hi = inside[len(inside) // 3], inside[2 * len(inside) // 3]
    window = {
        "startingOffsets": f'{{"{mixed.topic}": {{"0": -2, "1": {lo}, "2": -2, "3": -2}}}}',  # all, as Spark's
        "endingOffsets": f'{{"{mixed.topic}": {{"0": 0, "1": {hi}, "2": 0, "3": 0}}}}',
    }
    got = _view(_rows(spark.read.format("hybrid-kafka").options(**_source_options(mixed, stores, **window)).load()))
    assert sorted(got) == sorted(r for r in consumer_view if r[0] == 1 and lo <= r[1] < hi)


# -- streaming -----------------------------------------------------------------------------------


class Crash(RuntimeError):
    pass


def test_stream_in_micro_batches_with_a_crash_and_restart(
    spark: Any, mixed: Mixed, stores: Stores, consumer_view: set[Row], tmp_path: Path
) -> None:
    checkpoint = str(tmp_path / "checkpoint")
    options = _source_options(mixed, stores, startingOffsets="earliest", maxOffsetsPerTrigger="700")
    batches: dict[int, list[Row]] = {}
    chunked: dict[int, list[tuple[int, int, int]]] = {}
    runs: list[list[int]] = [[], [], []]
    run = 0

    def sink(frame: Any, batch_id: int) -> None:
        runs[run].append(batch_id)
        raw = _rows(frame)
        if run == 0 and batch_id == 1:
            raise Crash("simulated failure in the middle of the stream")
        batches[batch_id] = _view(raw)
        chunked[batch_id] = [(r["partition"], r["startingOffset"], r["offset"]) for r in raw if r["route"] == "chunked"]

    def start() -> Any:
        stream = spark.readStream.format("hybrid-kafka").options(**options).load()
        return (
            stream.writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )

    started = time.monotonic()
    query = start()
    with pytest.raises(Exception, match="simulated failure"):
        query.awaitTermination(120)
    assert runs[0] == [0, 1] and list(batches) == [0]
    run = 1
    query = start()
    query.awaitTermination(120)
    assert query.exception() is None
    elapsed = time.monotonic() - started
    assert runs[1][0] == 1, "the restart must replay the failed batch from the checkpoint"
    assert len(batches) >= 3
    everything = [row for rows in batches.values() for row in rows]
    assert len(everything) == len(set(everything)), "a message was emitted by two micro-batches"
    assert set(everything) == consumer_view
    # messages whose first segment was in an earlier micro-batch: they show the read-back at work
    crossing = 0
    for batch_id in sorted(batches)[1:]:
        previous_end = json.loads((Path(checkpoint) / "offsets" / str(batch_id - 1)).read_text().splitlines()[-1])
        ends = {int(p): o for p, o in previous_end[mixed.topic].items()}
        crossing += sum(start < ends[p] <= offset for p, start, offset in chunked[batch_id])
    assert crossing >= 1, "no chunked message straddles a micro-batch boundary"
    # a third run finds nothing new
    run = 2
    query = start()
    query.awaitTermination(60)
    assert runs[2] == []
    print(
        f"\nstream: {len(batches)} micro-batches {sorted(batches)} ({[len(b) for b in batches.values()]} rows), "
        f"{crossing} messages across batch boundaries, {elapsed:.1f}s"
    )


# -- reconcile and failOnDataLoss ------------------------------------------------------------------


@dataclass
class Planted:
    topic: str
    orphans: set[tuple[str, str]]
    dangling: set[tuple[str, str]]
    kept: set[tuple[str, str]]


def _put_envelope(producer: HybridProducer, topic: str, store: Any, name: str, payload: bytes) -> str:
    message_id = uuid.uuid4()
    locator = store.put(topic, message_id, payload)
    envelope = Envelope.for_payload(payload, store=name, locator=locator, message_id=message_id)
    producer.inner.produce(topic, value=encode_envelope(envelope), key=b"k", partition=0, headers=[envelope_header()])
    return locator


@pytest.fixture
def planted(kafka: KafkaService, own: Stores) -> Planted:
    stores = own
    topic = f"spark-reconcile-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    producer = HybridProducer(kafka.producer_config(), stores=stores.as_dict())
    for i in range(12):
        producer.produce(topic, os.urandom(2_000 + i), b"k", i % 2, route=f"reference:{'redis' if i % 3 else 's3'}")
        producer.produce(topic, b"plain", b"k", i % 2)
    dangling = set()
    for name, store in (("redis", stores.redis), ("s3", stores.s3)):
        locator = _put_envelope(producer, topic, store, name, os.urandom(1_000))
        store.delete(locator)  # the payload goes, the envelope stays
        dangling.add((name, locator))
    assert producer.flush(30) == 0
    orphans = {
        ("redis", stores.redis.put(topic, uuid.uuid4(), b"no envelope points here")),
        ("s3", stores.s3.put(topic, uuid.uuid4(), b"nor here")),
    }
    listed = {(name, loc) for name, store in stores.as_dict().items() for loc, _ in store.list_locators(topic)}
    kept = listed - orphans
    assert len(kept) == 12 and orphans <= listed
    time.sleep(0.01)  # --grace 0: written strictly before "now"
    return Planted(topic, orphans, dangling, kept)


def _cli_args(kafka: KafkaService, stores: Stores, topic: str, *extra: str) -> list[str]:
    opts = stores.options
    args = [
        "reconcile",
        "--bootstrap",
        kafka.bootstrap_servers,
        "--topic",
        topic,
        "--redis-url",
        opts["redis.url"],
        "--redis-prefix",
        opts["redis.prefix"],
        "--s3-bucket",
        opts["s3.bucket"],
        "--s3-prefix",
        opts["s3.prefix"],
        "--s3-region",
        opts["s3.region"],
    ]
    if "s3.endpoint" in opts:
        args += ["--s3-endpoint", opts["s3.endpoint"]]
    return args + list(extra)


def _reported(output: str, kind: str) -> set[tuple[str, str]]:
    found = set()
    for line in output.splitlines():
        line = line.strip()
        if line.startswith(f"{kind}: "):
            if kind == "orphan":
                _, store, locator = line.split(" ")[:3]
            else:  # "dangling: topic[p]@o -> store locator"
                store, locator = line.split(" -> ")[1].split(" ")[:2]
            found.add((store, locator))
    return found


def test_reconcile_finds_exactly_the_planted_orphans_and_dangling_envelopes(
    spark: Any,
    kafka: KafkaService,
    own: Stores,
    planted: Planted,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.cli import main
    from gateway.spark import reconcile

    stores = own
    if "s3.access.key" in stores.options:  # the CLI takes S3 credentials from the environment, as boto3 does
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", stores.options["s3.access.key"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", stores.options["s3.secret.key"])
    started = time.monotonic()
    assert main(_cli_args(kafka, stores, planted.topic, "--grace", "0")) == 1  # dangling envelopes: exit 1
    report = capsys.readouterr().out
    assert _reported(report, "orphan") == planted.orphans
    assert _reported(report, "dangling") == planted.dangling
    assert "deleted:" not in report
    for name, locator in planted.orphans:  # nothing deleted without --delete
        assert stores.as_dict()[name].get(locator)

    # inside the grace period nothing is an orphan yet
    api = reconcile(
        spark,
        {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": planted.topic, **stores.options},
        grace_seconds=3600,
    )
    assert api.orphans == [] and api.young == 2 and api.envelopes == 14 and len(api.dangling) == 2

    assert main(_cli_args(kafka, stores, planted.topic, "--grace", "0", "--delete")) == 1
    report = capsys.readouterr().out
    assert {line.split("deleted: ")[1] for line in report.splitlines() if "deleted: " in line} == {
        locator for _, locator in planted.orphans
    }
    for name, locator in planted.orphans:
        with pytest.raises(PayloadNotFoundError):
            stores.as_dict()[name].get(locator)
    left = {(name, loc) for name, store in stores.as_dict().items() for loc, _ in store.list_locators(planted.topic)}
    assert left == planted.kept
    print(f"\nreconcile: three runs in {time.monotonic() - started:.1f}s")


def test_reconcile_never_deletes_payloads_referenced_under_another_store_name_or_in_doubt(
    spark: Any, kafka: KafkaService, own: Stores, redis_server: RedisServer
) -> None:
    """Issue 13: objects were matched to envelopes by (store name, locator), so a producer that named
    its store ``blob`` had every live payload reported as an orphan and deleted by ``--delete``."""
    from gateway.spark import reconcile

    stores = own

    topic = f"spark-names-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=1)
    blob = RedisStore(redis_server.client(), prefix=stores.redis.prefix, name="blob")
    producer = HybridProducer(kafka.producer_config(), stores={"blob": blob})
    for i in range(5):
        producer.produce(topic, os.urandom(1_000 + i), b"k", 0, route="reference:blob")
    assert producer.flush(30) == 0
    live = sorted(loc for loc, _ in blob.list_locators(topic))
    orphan = stores.redis.put(topic, uuid.uuid4(), b"no envelope points here")
    upload_key = stores.s3.key_for(topic, uuid.uuid4())  # a producer killed mid-upload
    upload = stores.s3.client.create_multipart_upload(Bucket=stores.s3.bucket, Key=upload_key)["UploadId"]
    time.sleep(0.01)
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic, **stores.options}
    report = reconcile(spark, options, grace_seconds=0, delete=True)
    assert [o.locator for o in report.orphans] == [orphan] and report.deleted == [orphan]
    assert [label.split(" ")[0] for label in report.aborted] == [upload_key] and upload in report.aborted[0]
    assert report.unchecked == 5 and report.dangling == [] and report.ok
    assert sorted(loc for loc, _ in blob.list_locators(topic)) == live

    # a record marked as an envelope that does not decode may point at any orphan: keep them all
    producer.inner.produce(
        topic, value=b"\x1bGWREF\x07 from a newer producer", key=b"k", partition=0, headers=[envelope_header()]
    )
    assert producer.flush(30) == 0
    second = stores.redis.put(topic, uuid.uuid4(), b"nor here")
    time.sleep(0.01)
    report = reconcile(spark, options, grace_seconds=0, delete=True)
    assert [o.locator for o in report.orphans] == [second] and report.deleted == []
    assert len(report.broken) == 1 and report.withheld is not None and not report.ok
    assert any("kept all 1 orphans" in line for line in report.lines())
    assert stores.redis.get(second) == b"nor here"


def test_fail_on_data_loss_decides_between_an_error_row_and_a_failed_query(
    spark: Any, kafka: KafkaService, own: Stores, planted: Planted
) -> None:
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": planted.topic, **own.options}
    rows = spark.read.format("hybrid-kafka").options(**options).option("failOnDataLoss", "false").load().collect()
    broken = [r for r in rows if r["error"] is not None]
    assert len(broken) == 2 and all(r["value"] is None and r["route"] == "reference" for r in broken)
    assert all("PayloadNotFoundError" in r["error"] for r in broken)
    assert len(rows) == 12 * 2 + 2 and all(r["value"] is not None for r in rows if r["error"] is None)
    # the error names the record: topic, partition and offset
    where = rf"reference message at {re.escape(planted.topic)}\[\d+\] offset \d+ cannot be delivered"
    with pytest.raises(Exception, match=where):
        spark.read.format("hybrid-kafka").options(**options).load().collect()


def test_the_source_binds_envelopes_to_their_topic_and_bounds_declared_sizes(
    spark: Any, kafka: KafkaService, stores: Stores
) -> None:
    """The consumer's rules in a Spark task: a copy of another topic's envelope and a forged size are error
    rows, the mirror's rename serves its source's envelopes, and the rows after them are read."""
    source = f"spark-source-{uuid.uuid4().hex[:8]}"
    mirror = f"dr.{source}"
    for name in (source, mirror):
        kafka.create_topic(name, partitions=1)
    producer = HybridProducer(kafka.producer_config(), stores=stores.as_dict())
    value = os.urandom(5_000)
    producer.produce(source, value, b"copied", 0, route="reference:redis")
    assert producer.flush(30) == 0
    (raw,) = read_partition(kafka.consumer_config(), source, 0, 1)
    mid = uuid.uuid4()
    forged = Envelope("s3", stores.s3.locator_for(mirror, mid), 2**41, b"\0" * 32, mid)
    for key, record_value in ((b"copied", raw.value()), (b"forged", encode_envelope(forged))):
        producer.inner.produce(mirror, value=record_value, key=key, partition=0, headers=[envelope_header()])
    producer.inner.produce(mirror, value=b"the next record", key=b"next", partition=0)
    assert producer.flush(30) == 0
    producer.close()
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribe": mirror,
        "failOnDataLoss": "false",
        **stores.options,
    }
    reader = spark.read.format("hybrid-kafka").options(**options)
    refused = {bytes(r["key"]): r for r in reader.load().collect()}
    assert refused[b"copied"]["value"] is None and "LocatorTopicError" in refused[b"copied"]["error"]
    served = {bytes(r["key"]): r for r in reader.option("reference.topic.renames", "dr.${topic}").load().collect()}
    assert served[b"copied"]["error"] is None and bytes(served[b"copied"]["value"]) == value
    for rows in (refused, served):
        assert rows[b"forged"]["value"] is None and "PayloadTooLargeError" in rows[b"forged"]["error"]
        assert bytes(rows[b"next"]["value"]) == b"the next record"
