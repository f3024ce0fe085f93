"""Records other libraries wrote, interleaved with our three routes on one topic, read back byte-identical.

Who writes what:
* bakdata: ``com.bakdata.kafka:large-message-serde`` itself, run by tests/peerwriters (a small Java program
  built from Maven Central), both protocols, inline and stored, gzip/snappy/lz4/zstd, keys too;
* kaf-s3: ``kaf-s3-connector``'s own ``S3Producer`` (PyPI), inline and offloaded, plain and gzip;
* AWS: ``payloadoffloading-common``'s own ``S3BackedPayloadStore`` (Maven Central), run by tests/peerwriters:
  it uploads the payload and returns the pointer JSON, which is what the extended clients send.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import cramjam
import pytest

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.errors import LocatorError, PayloadIntegrityError
from gateway.protocol.peers import BAKDATA_COMPRESSION_HEADERS, BAKDATA_VALUE_HEADER
from gateway.testing import KafkaService
from gateway.testing.s3_server import S3Server
from stores import RedisStore, S3Store
from tests.bombs import MIB, peak_growth, reset_peak, zeros

PEERS_DIR = Path(__file__).resolve().parents[1] / "peerwriters"
FORMATS = "bakdata,kafs3,aws"


def _payload(tag: str, size: int) -> bytes:
    seed = (tag.encode() * (size // max(1, len(tag)) + 1))[:size]
    return bytes(b ^ (i * 31 % 251) for i, b in enumerate(seed))  # not all one byte: compression has work


def _java(main: str, spec: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    """Run a tests/peerwriters program on ``spec``; its stdout is one JSON line per record written."""
    if not (PEERS_DIR / "target" / "lib").is_dir():
        pytest.fail("tests/peerwriters is not built: run `make peer-writers` (make test does)")
    spec_file = tmp_path / f"{main}-{uuid.uuid4().hex[:6]}.json"
    spec_file.write_text(json.dumps(spec))
    classpath = f"{PEERS_DIR / 'target' / 'classes'}{os.pathsep}{PEERS_DIR / 'target' / 'lib' / '*'}"
    done = subprocess.run(
        ["java", "-cp", classpath, f"gateway.peers.{main}", str(spec_file)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _write_ours(topic: str, kafka: KafkaService, store: RedisStore, expected: list[tuple[Any, Any]]) -> None:
    producer = HybridProducer(
        {**kafka.producer_config(), "max.message.segment.bytes": 200_000},
        policy=SizeThresholdPolicy(reference_above=1_500_000, store="redis"),
        stores={"redis": store},
    )
    with producer:
        for route, size in (("plain", 300), ("chunked", 700_000), ("reference", 2_500_000)):
            value = _payload(f"ours-{route}", size)
            producer.produce(topic, value, key=f"ours-{route}".encode(), partition=0)
            producer.flush(30)
            expected.append((f"ours-{route}".encode(), value))


def _write_bakdata(
    topic: str, kafka: KafkaService, s3: S3Server, bucket: str, tmp_path: Path, expected: list[tuple[Any, Any]]
) -> None:
    cases = [
        # (key, value, use_headers, compression, threshold)
        (b"bd-inline", _payload("bd-inline", 500), False, "none", 10_000),
        (b"bd-flag-backed", _payload("bd-flag-backed", 3_000_000), False, "none", 10_000),
        (b"bd-hdr-inline", _payload("bd-hdr-inline", 800), True, "gzip", 10_000),
        (b"bd-hdr-null", None, True, "none", 10_000),
    ]
    cases += [
        (f"bd-hdr-{codec}".encode(), _payload(f"bd-hdr-{codec}", 2_000_000), True, codec, 10_000)
        for codec in ("none", "gzip", "snappy", "lz4", "zstd")
    ]
    big_key = _payload("bd-big-key", 20_000)  # a key over the threshold is stored too, in keys/
    cases.append((big_key, _payload("bd-big-key-value", 50), True, "zstd", 10_000))
    spec = {
        "bootstrap": kafka.bootstrap_servers,
        "topic": topic,
        "s3_endpoint": s3.endpoint_url,
        "base_path": f"s3://{bucket}/bakdata/",
        "records": [
            {
                "partition": 0,
                "key_b64": _b64(key),
                "value_b64": _b64(value),
                "use_headers": headers,
                "compression": codec,
                "max_byte_size": threshold,
            }
            for key, value, headers, codec, threshold in cases
        ],
    }
    assert len(_java("BakdataWriter", spec, tmp_path)) == len(cases)
    expected += [(key, value) for key, value, *_ in cases]


def _write_kafs3(topic: str, kafka: KafkaService, s3: S3Server, bucket: str, expected: list[tuple[Any, Any]]) -> None:
    from s3_connector.producer import S3Producer  # kaf-s3's own producer

    for compression in (None, "gzip"):
        producer = S3Producer(
            {
                "kafka": kafka.producer_config(),
                "s3": {
                    "bucket": bucket,
                    "endpoint_url": s3.endpoint_url,
                    "region_name": "us-east-1",
                    "prefix": "kafs3",
                    "max_inline_bytes": 100_000,
                    "compression": compression,
                },
            }
        )
        for tag, size in (("small", 2_000), ("large", 2_200_000)):
            key = f"kafs3-{tag}-{compression}".encode()
            value = _payload(key.decode(), size)
            producer.produce(topic, value, key=key)
            expected.append((key, value))
            assert producer.flush(30) == 0


def _write_aws(
    topic: str, kafka: KafkaService, s3: S3Server, bucket: str, tmp_path: Path, expected: list[tuple[Any, Any]]
) -> None:
    # the payload store takes text: the extended clients offload message bodies, which are strings
    values = [(b"aws-1", b"aws-1 text " * 110_000), (b"aws-2", "\u00e9t\u00e9 \u2603".encode())]
    spec = {
        "bootstrap": kafka.bootstrap_servers,
        "topic": topic,
        "s3_endpoint": s3.endpoint_url,
        "bucket": bucket,
        "records": [{"partition": 0, "key_b64": _b64(k), "value_b64": _b64(v)} for k, v in values],
    }
    assert len(_java("AwsPointerWriter", spec, tmp_path)) == len(values)
    expected += values


@pytest.fixture
def peer_bucket(s3_server: S3Server, s3_client: Any) -> str:
    return s3_server.create_bucket(f"peers-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def mixed_topic(
    kafka: KafkaService,
    topic: str,
    redis_client: Any,
    s3_server: S3Server,
    peer_bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[str, list[tuple[Any, Any]]]:
    """Our routes and every peer format, interleaved on one partition: ``(key, value)`` as written.

    Our Redis payloads are kept under the topic's name as prefix.
    """
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    expected: list[tuple[Any, Any]] = []
    store = RedisStore(redis_client, prefix=topic)
    _write_ours(topic, kafka, store, expected)
    _write_bakdata(topic, kafka, s3_server, peer_bucket, tmp_path, expected)
    _write_kafs3(topic, kafka, s3_server, peer_bucket, expected)
    _write_aws(topic, kafka, s3_server, peer_bucket, tmp_path, expected)
    return topic, expected


def _read_all(consumer: HybridConsumer, count: int) -> list[tuple[Any, Any]]:
    got: list[tuple[Any, Any]] = []
    for _ in range(120):
        for msg in consumer.consume(50, 1.0):
            assert msg.error() is None, msg.error()
            got.append((msg.key(), msg.value()))
        if len(got) >= count:
            break
    return got


@pytest.mark.requires("java_clients")  # tests/peerwriters runs Java clients, which the mock cannot serve
def test_every_peer_format_beside_our_routes_reads_back_byte_identical(
    kafka: KafkaService,
    mixed_topic: tuple[str, list[tuple[Any, Any]]],
    redis_client: Any,
    s3_server: S3Server,
    peer_bucket: str,
) -> None:
    topic, expected = mixed_topic
    stores: dict[str, Any] = {
        "redis": RedisStore(redis_client, prefix=topic),
        "peers": S3Store(s3_server.client(), bucket=peer_bucket, prefix="", name="peers"),
    }
    conf = {**kafka.consumer_config(), "large.message.peer.formats": FORMATS, "large.message.peer.bakdata.keys": True}
    with HybridConsumer(conf, stores=stores) as consumer:
        consumer.subscribe([topic])
        got = _read_all(consumer, len(expected))
        metrics = consumer.metrics()
    assert [k for k, _ in got] == [k for k, _ in expected]
    for (key, value), (_, want_value) in zip(got, expected, strict=True):
        assert value == want_value, key[:40]
    assert metrics["resolver.peer.records"] >= 10


@pytest.mark.requires("java_clients")
def test_without_the_setting_peer_records_are_plain_values(
    kafka: KafkaService, mixed_topic: tuple[str, list[tuple[Any, Any]]], redis_client: Any
) -> None:
    topic, expected = mixed_topic
    with HybridConsumer(kafka.consumer_config(), stores={"redis": RedisStore(redis_client, prefix=topic)}) as consumer:
        consumer.subscribe([topic])
        got = _read_all(consumer, len(expected))
    pointers = [v for _, v in got if v is not None and (v.startswith(b'{"s3_bucket"') or v.startswith(b"["))]
    assert len(pointers) == 4  # two kaf-s3 references and two AWS pointers came back as the JSON they are


def test_a_pointer_outside_every_store_is_a_typed_error_with_its_record_and_no_request(
    kafka: KafkaService, topic: str, s3_server: S3Server, peer_bucket: str, s3_client: Any
) -> None:
    from confluent_kafka import Producer

    s3_client.put_object(Bucket=peer_bucket, Key="secret/x", Body=b"not yours")
    raw = Producer(kafka.producer_config())
    pointer = ["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": peer_bucket, "s3Key": "secret/x"}]
    raw.produce(topic, json.dumps(pointer).encode(), partition=0)
    raw.produce(topic, b"after", partition=0)
    raw.flush(30)
    store = S3Store(s3_server.client(), bucket=peer_bucket, prefix="allowed/", name="peers")
    conf = {**kafka.consumer_config(), "large.message.peer.formats": "aws"}
    with HybridConsumer(conf, stores={"peers": store}) as consumer:
        consumer.subscribe([topic])
        with pytest.raises(LocatorError, match="outside every configured store") as raised:
            for _ in range(60):
                consumer.consume(10, 1.0)
        assert raised.value.kafka_message is not None and raised.value.kafka_message.offset() == 0
        after = _read_all(consumer, 1)
    assert after == [(None, b"after")]  # the loop goes on; the error held commits at the bad record
    assert store.metrics().get("get", 0) == 0


def test_decompression_bombs_are_typed_errors_with_their_records_within_the_limit_of_memory(
    kafka: KafkaService, topic: str, s3_server: S3Server, peer_bucket: str, s3_client: Any
) -> None:
    """The issue's bombs as bakdata stores blobs (zstd: 512 MiB of zeros in 16 KB; lz4: 64 MiB in 280 KB).

    With a 1 MiB limit, each is a ``PayloadIntegrityError`` carrying its record, the loop goes on to a
    blob exactly at the limit and the record after, and the process's RSS never rises by more than
    the limit and the decoder's buffers (the bombs took 1 GiB and 128 MiB before).
    """
    from confluent_kafka import Producer

    limit = MIB
    fits = bytes(range(256)) * (limit // 256)
    objects = {"zstd": zeros("zstd", 512 * MIB), "lz4": zeros("lz4", 64 * MIB), "fits": cramjam.zstd.compress(fits)}
    raw = Producer(kafka.producer_config())
    for name, codec_id in (("zstd", 4), ("lz4", 3), ("fits", 4)):
        s3_client.put_object(Bucket=peer_bucket, Key=f"bakdata/{name}", Body=bytes(objects[name]))
        headers = [(BAKDATA_VALUE_HEADER, b"\x01"), (BAKDATA_COMPRESSION_HEADERS[0], bytes([codec_id]))]
        raw.produce(
            topic, f"s3://{peer_bucket}/bakdata/{name}".encode(), key=name.encode(), headers=headers, partition=0
        )
    raw.produce(topic, b"after", key=b"after", partition=0)
    raw.flush(30)
    store = S3Store(s3_server.client(), bucket=peer_bucket, prefix="bakdata/", name="peers")
    store.get_object("bakdata/fits", limit)  # the S3 client's first request loads its models: not decoding's memory
    conf = {**kafka.consumer_config(), "large.message.peer.formats": "bakdata", "large.message.peer.max.bytes": limit}
    errors: list[PayloadIntegrityError] = []
    got: list[tuple[Any, Any]] = []
    with HybridConsumer(conf, stores={"peers": store}) as consumer:
        consumer.subscribe([topic])
        before = reset_peak()
        for _ in range(60):
            try:
                got += [(msg.key(), msg.value()) for msg in consumer.consume(10, 1.0)]
            except PayloadIntegrityError as exc:
                errors.append(exc)
            if len(got) >= 2:
                break
        growth = peak_growth(before)
    assert [(e.kafka_message.offset(), e.kafka_message.key()) for e in errors if e.kafka_message] == [
        (0, b"zstd"),
        (1, b"lz4"),
    ]
    assert all("beyond the limit of 1048576 bytes" in str(e) for e in errors)
    assert got == [(b"fits", fits), (b"after", b"after")]
    assert growth <= limit + 32 * MIB, f"peak RSS grew {growth / MIB:.0f} MiB"


@pytest.mark.requires("java_clients")
def test_spark_reader_reads_peer_formats(
    spark: Any,
    kafka: KafkaService,
    mixed_topic: tuple[str, list[tuple[Any, Any]]],
    redis_server: Any,
    s3_server: S3Server,
    peer_bucket: str,
) -> None:
    topic, expected = mixed_topic
    rows = (
        spark.read.format("hybrid-kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("redis.url", redis_server.url)
        .option("redis.prefix", topic)
        .option("s3.endpoint", s3_server.endpoint_url)
        .option("s3.access.key", "testing")
        .option("s3.secret.key", "testing")
        .option("s3.region", "us-east-1")
        .option("large.message.peer.formats", FORMATS)
        .option("large.message.peer.bakdata.keys", "true")
        .option("peer.s3.buckets", f"{peer_bucket}/")
        .load()
        .orderBy("offset")
        .select("key", "value", "error")
        .collect()
    )
    assert [r.error for r in rows] == [None] * len(expected)
    assert [tuple(None if b is None else bytes(b) for b in (r.key, r.value)) for r in rows] == expected


def test_spark_reader_reports_a_pointer_outside_every_store_in_the_error_column(
    spark: Any, kafka: KafkaService, topic: str, s3_server: S3Server, peer_bucket: str, s3_client: Any
) -> None:
    from confluent_kafka import Producer

    s3_client.put_object(Bucket=peer_bucket, Key="allowed/x", Body=b"readable")
    s3_client.put_object(Bucket=peer_bucket, Key="secret/x", Body=b"not yours")
    raw = Producer(kafka.producer_config())
    for key in ("allowed/x", "secret/x"):
        pointer = ["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": peer_bucket, "s3Key": key}]
        raw.produce(topic, json.dumps(pointer).encode(), partition=0)
    raw.flush(30)
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribe": topic,
        "s3.endpoint": s3_server.endpoint_url,
        "s3.access.key": "testing",
        "s3.secret.key": "testing",
        "s3.region": "us-east-1",
        "large.message.peer.formats": "aws",
        "peer.s3.buckets": f"{peer_bucket}/allowed/",
    }
    lenient = spark.read.format("hybrid-kafka").options(**options, failOnDataLoss="false").load()
    rows = lenient.orderBy("offset").select("value", "error").collect()
    assert bytes(rows[0].value) == b"readable" and rows[0].error is None
    assert rows[1].value is None and "outside every configured store" in rows[1].error
    with pytest.raises(Exception, match="outside every configured store"):
        spark.read.format("hybrid-kafka").options(**options).load().collect()
