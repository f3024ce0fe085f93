"""reference.encryption through Spark: the sink seals with a key ring file, the reader opens it, and a
reader without the key ring fails rather than returning ciphertext."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway import HybridConsumer
from gateway.encryption import LocalKeyRing
from gateway.protocol.envelope import decode_envelope
from gateway.spark.options import OptionError
from gateway.spark.sink import parse_sink_options
from gateway.testing import KafkaService, RedisServer, S3Server
from stores import RedisStore
from tests.helpers import consume_all, payload, sha
from tests.kafkautil import read_partition

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

KEY = bytes(range(32))


@pytest.fixture
def keyring_file(tmp_path: Path) -> str:
    path = tmp_path / "keyring.json"
    path.touch(mode=0o600)
    path.write_text(json.dumps({"current": "spark-k1", "keys": {"spark-k1": base64.b64encode(KEY).decode()}}))
    return str(path)


def test_the_sink_seals_and_the_reader_opens_with_the_key_ring(
    spark: Any, kafka: KafkaService, redis_server: RedisServer, keyring_file: str
) -> None:
    prefix = f"gwenc{uuid.uuid4().hex[:6]}"
    topic = f"spark-enc-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=1)
    sizes = (1_000, 1_500_000, 3_000_000)
    rows = [(f"k{i}".encode(), payload(size, seed=i)) for i, size in enumerate(sizes)]
    stores = {"redis.url": redis_server.url, "redis.prefix": prefix, "encryption.keyring": keyring_file}
    (
        spark.createDataFrame(rows, "key binary, value binary")
        .write.format("hybrid-kafka")
        .mode("append")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", topic)
        .option("reference.above", "1000000")
        .option("reference.encryption", "aes256-gcm")
        .options(**stores)
        .save()
    )
    records = read_partition(kafka.consumer_config(), topic, 0, len(sizes))
    sealed = [decode_envelope(r.value()) for r in records if r.value()[:1] == b"\x1b"]
    assert len(sealed) == 2 and all(e.encryption is not None and e.encryption.key_id == "spark-k1" for e in sealed)
    client = redis_server.client()
    raw = b"".join(client.get(k) or b"" for k in client.scan_iter(match=f"{prefix}:*") if client.type(k) == b"string")
    assert payload(sizes[1], seed=1)[:64] not in raw
    expected = {f"k{i}".encode(): sha(payload(size, seed=i)) for i, size in enumerate(sizes)}
    frame = (
        spark.read.format("hybrid-kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .options(**stores)
        .load()
    )
    assert {bytes(r["key"]): sha(bytes(r["value"])) for r in frame.select("key", "value").collect()} == expected
    consumer = HybridConsumer(
        {**kafka.consumer_config(), "auto.offset.reset": "earliest"},
        stores={"redis": RedisStore(client, prefix=prefix)},
        key_provider=LocalKeyRing.from_file(keyring_file),
    )
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, len(sizes))
    consumer.close()
    assert not errors and {m.key(): sha(m.value()) for m in got} == expected
    without = {k: v for k, v in stores.items() if k != "encryption.keyring"}
    unkeyed = (
        spark.read.format("hybrid-kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .options(**without)
        .load()
    )
    with pytest.raises(Exception, match=r"KeyUnavailableError|no key_provider"):
        unkeyed.select("value").collect()


def test_the_sink_refuses_encryption_without_a_key_ring() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "redis.url": "redis://h:1/0", "reference.above": "10"}
    with pytest.raises(OptionError, match=r"needs encryption\.keyring"):
        parse_sink_options({**base, "reference.encryption": "aes256-gcm"})
    with pytest.raises(OptionError, match="none or aes256-gcm"):
        parse_sink_options({**base, "reference.encryption": "rot13", "encryption.keyring": "env"})


def test_the_sink_seals_and_the_reader_opens_with_kms(
    spark: Any, kafka: KafkaService, redis_server: RedisServer, s3_server: S3Server
) -> None:
    """KMS from the options: each executor makes its own client; the key never leaves KMS in clear."""
    if s3_server.external:
        pytest.skip("KMS tests run against moto's server only, never an account")
    key_arn = str(s3_server.kms_client().create_key(Description="spark")["KeyMetadata"]["Arn"])
    prefix = f"gwkms{uuid.uuid4().hex[:6]}"
    topic = f"spark-kms-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=1)
    rows = [(f"k{i}".encode(), payload(2_000_000, seed=i)) for i in range(2)]
    kms = {
        "encryption.kms.key": key_arn,
        "encryption.kms.region": s3_server.region,
        "encryption.kms.endpoint": str(s3_server.endpoint_url),
        "encryption.kms.access.key": "testing",
        "encryption.kms.secret.key": "testing",
    }
    stores = {"redis.url": redis_server.url, "redis.prefix": prefix}
    (
        spark.createDataFrame(rows, "key binary, value binary")
        .write.format("hybrid-kafka")
        .mode("append")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", topic)
        .option("reference.above", "1000000")
        .option("reference.encryption", "aes256-gcm")
        .option("reference.compression", "zstd")
        .options(**stores, **kms)
        .save()
    )
    records = read_partition(kafka.consumer_config(), topic, 0, len(rows))
    sealed = [decode_envelope(r.value()) for r in records]
    assert all(e.encryption is not None and e.encryption.key_id == key_arn for e in sealed), sealed
    assert all(e.compression == "zstd" for e in sealed), "compressed, then sealed"
    client = redis_server.client()
    raw = b"".join(client.get(k) or b"" for k in client.scan_iter(match=f"{prefix}:*") if client.type(k) == b"string")
    assert rows[0][1][:64] not in raw and 0 < len(raw) < 100_000, "the compressed payloads, sealed, are stored"

    def read(options: dict[str, str]) -> Any:
        return (
            spark.read.format("hybrid-kafka")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("subscribe", topic)
            .options(**options)
            .load()
            .select("key", "value")
        )

    expected = {key: sha(value) for key, value in rows}
    assert {bytes(r["key"]): sha(bytes(r["value"])) for r in read({**stores, **kms}).collect()} == expected
    with pytest.raises(Exception, match=r"KeyUnavailableError|no key_provider"):
        read(stores).collect()


def test_kms_options_are_checked_on_the_driver() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "redis.url": "redis://h:1/0", "reference.above": "10"}
    sealed = {**base, "reference.encryption": "aes256-gcm"}
    assert parse_sink_options({**sealed, "encryption.kms.key": "alias/k"}).stores.kms is not None
    with pytest.raises(OptionError, match="two key providers"):
        parse_sink_options({**sealed, "encryption.kms.key": "alias/k", "encryption.keyring": "env"})
    with pytest.raises(OptionError, match="go together"):
        parse_sink_options({**sealed, "encryption.kms.key": "alias/k", "encryption.kms.access.key": "a"})
    with pytest.raises(OptionError, match=r"reference\.compression must be one of"):
        parse_sink_options({**sealed, "encryption.kms.key": "k", "reference.compression": "brotli"})
    with pytest.raises(OptionError, match=r"without encryption\.kms\.key"):
        parse_sink_options({**sealed, "encryption.keyring": "env", "encryption.kms.region": "eu-west-1"})
    secret = parse_sink_options(
        {**sealed, "encryption.kms.key": "k", "encryption.kms.access.key": "a", "encryption.kms.secret.key": "s3cr3t-x"}
    )
    assert "s3cr3t-x" not in repr(secret), "the secret key stays out of the options' repr"
