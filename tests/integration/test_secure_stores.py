"""The Redis and S3 stores over TLS with least-privilege credentials (issue 32, item 2).

redis-server speaks TLS only, its ``default`` user is disabled once the documented ACL user
(docs/security.md) exists, and moto's S3 speaks HTTPS only, with a CA no system trust store knows.
Every client of the stores (producer, consumer, transactions, the aio clients, ``gateway gc``, the
Spark reader and sink, ``gateway reconcile``) is given the CA and the credentials the documented
way and works; without the CA, or with a wrong password, each gets one typed error that names TLS or
authentication (or S3's ``SignatureDoesNotMatch``) and shows no password, and the consumer goes on to
the next record. moto enforces IAM here: the one S3 user holds the documented actions on ``gw*`` keys.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis
from botocore.config import Config
from confluent_kafka import KafkaException

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.aio import AIOHybridConsumer, AIOHybridProducer
from gateway.errors import PayloadNotFoundError, StoreError, StoreUnavailableError
from gateway.testing import KafkaService, ServiceUnavailable
from gateway.testing.redis_server import RedisServer
from gateway.testing.s3_server import S3Server
from gateway.testing.tls import TlsFiles, make_tls_files
from stores import RedisStore, S3Store, redis_client_from_url
from tests.helpers import consume_all, payload, sha
from tests.integration.test_redis_acl import PASSWORD, documented_rules

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "security.md"
USER = "gateway"
ADMIN_PASSWORD = "admin-pw-Vb62"
WRONG_PASSWORD = "wrong-pw-Kd07"
BUCKET = "secure-payloads"
SECRETS = [PASSWORD, ADMIN_PASSWORD, WRONG_PASSWORD]
"""Known secrets, and the S3 secret key once moto made it: none may show in an error, a log or a ``repr``."""
SEGMENT = 100_000


def assert_no_secret(*texts: object) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in str(text), f"{secret!r} leaked into: {text}"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_redis(tls: TlsFiles) -> Iterator[RedisServer]:
    """TLS only; after the ACL user is made, ``default`` is switched off: the ACL user is the only way in."""
    server = RedisServer(password=ADMIN_PASSWORD, tls=tls, from_env=False)
    try:
        server.start()
    except ServiceUnavailable as exc:
        pytest.skip(exc.reason)
    with server:
        admin = server.client()
        admin.execute_command("ACL", "SETUSER", USER, "reset", *documented_rules())
        admin.execute_command("ACL", "SETUSER", "default", "off")
        admin.close()
        yield server


@dataclass(frozen=True)
class SecureS3:
    """moto over HTTPS that authorizes only ``key_id``'s signed requests, and only what its policy allows."""

    server: S3Server
    key_id: str
    secret: str = field(repr=False)


def documented_s3_actions() -> list[str]:
    """Every ``s3:`` action of the "S3 IAM" table in docs/security.md (the producer, consumer, gc and reconcile
    rows and the administrator's), for one user that runs them all here."""
    text = DOCS.read_text(encoding="utf-8")
    table = text[text.index("### S3 IAM") : text.index("With SSE-KMS")]
    return sorted({action for action in re.findall(r"`(s3:[A-Za-z]+)`", table) if action != "s3:prefix"})


@pytest.fixture(scope="module")
def tls_s3(tls: TlsFiles) -> Iterator[SecureS3]:
    """HTTPS only; once the bucket and the IAM user exist, every request must be signed by that user's key
    and allowed by a policy of the documented actions on the bucket's ``gw*`` keys."""
    server = S3Server(tls=tls, from_env=False)
    try:
        server.start()
    except ServiceUnavailable as exc:
        pytest.skip(exc.reason)
    with server:
        server.create_bucket(BUCKET)
        iam = server.service_client("iam")
        iam.create_user(UserName=USER)
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    # moto checks HeadBucket as an action of its own; AWS authorizes it with s3:ListBucket
                    "Action": [*documented_s3_actions(), "s3:HeadBucket"],
                    "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/gw*"],
                }
            ],
        }
        iam.put_user_policy(UserName=USER, PolicyName="gateway-payloads", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=USER)["AccessKey"]
        server.require_authentication()
        SECRETS.append(key["SecretAccessKey"])
        yield SecureS3(server, key["AccessKeyId"], key["SecretAccessKey"])


def acl_url(server: RedisServer, *, password: str = PASSWORD, ca_certs: bool = True) -> str:
    """The documented form: ``rediss://gateway:PASSWORD@host:port/0?ssl_ca_certs=/path/ca.pem``."""
    return server.url_for(username=USER, password=password, ca_certs=ca_certs)


def s3_client(s3: SecureS3, *, ca_bundle: bool = True, secret: str | None = None) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=s3.server.endpoint_url,
        region_name=s3.server.region,
        aws_access_key_id=s3.key_id,
        aws_secret_access_key=secret or s3.secret,
        verify=s3.server.ca_bundle if ca_bundle else None,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


@pytest.fixture
def prefix() -> str:
    """A fresh key prefix inside the ACL's ``~gw:*``, so tests sharing the module's servers never meet."""
    return f"gw:{uuid.uuid4().hex[:8]}"


@pytest.fixture
def stores(tls_redis: RedisServer, tls_s3: SecureS3, prefix: str) -> Iterator[dict[str, Any]]:
    made = {
        "redis": RedisStore(redis_client_from_url(acl_url(tls_redis)), prefix=prefix, entry_bytes=64 * 1024),
        "s3": S3Store(s3_client(tls_s3), bucket=BUCKET, prefix=prefix.replace(":", "-") + "/"),
    }
    yield made
    for store in made.values():
        store.close()


def _producer(kafka: KafkaService, stores: dict[str, Any], store: str, **conf: Any) -> HybridProducer:
    config = {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT, **conf}
    return HybridProducer(config, policy=SizeThresholdPolicy(reference_above=200_000, store=store), stores=stores)


def _produce_references(kafka: KafkaService, topic: str, stores: dict[str, Any]) -> dict[bytes, str]:
    """One reference per store (the Redis one in several entries, read by the direct MGET over TLS) and a plain one."""
    sent = {b"redis": payload(300_000, 1), b"s3": payload(250_000, 2), b"plain": b"plain after them"}
    for name in ("redis", "s3"):
        with _producer(kafka, stores, name) as producer:
            producer.produce(topic, sent[name.encode()], key=name.encode())
            if name == "s3":
                producer.produce(topic, sent[b"plain"], key=b"plain")
            assert producer.flush(30) == 0
    return {key: sha(value) for key, value in sent.items()}


def test_references_round_trip_through_both_tls_stores_under_the_acl(
    kafka: KafkaService, topic: str, stores: dict[str, Any]
) -> None:
    expected = _produce_references(kafka, topic, stores)
    assert len(list(stores["redis"].list_locators(topic))) == 1 and len(list(stores["s3"].list_locators(topic))) == 1
    with HybridConsumer(kafka.consumer_config(), stores=stores) as consumer:
        consumer.subscribe([topic])
        messages, errors = consume_all(consumer, 3)
    assert errors == []
    assert {m.key(): sha(m.value()) for m in messages} == expected


@pytest.mark.requires("transactions")
def test_an_aborted_transaction_takes_its_tls_store_writes_back_and_a_committed_one_reads(
    kafka: KafkaService, topic: str, stores: dict[str, Any]
) -> None:
    for name in ("redis", "s3"):
        conf = {"transactional.id": f"tls-{uuid.uuid4().hex[:8]}"}
        with _producer(kafka, stores, name, **conf) as producer:
            producer.init_transactions(60)
            producer.begin_transaction()
            producer.produce(topic, payload(400_000, 3), key=b"aborted")
            producer.flush(30)
            assert len(list(stores[name].list_locators(topic))) == 1
            producer.abort_transaction(60)
            assert list(stores[name].list_locators(topic)) == [], f"{name}: the abort left the payload"
            producer.begin_transaction()
            producer.produce(topic, payload(400_000, 4), key=name.encode())
            producer.commit_transaction(60)
    conf = {**kafka.consumer_config(), "isolation.level": "read_committed"}
    with HybridConsumer(conf, stores=stores) as consumer:
        consumer.subscribe([topic])
        messages, errors = consume_all(consumer, 2)
    assert errors == []
    assert {m.key(): sha(m.value()) for m in messages} == {k: sha(payload(400_000, 4)) for k in (b"redis", b"s3")}


def test_the_aio_clients_round_trip_and_roll_back_over_tls(
    kafka: KafkaService, topic: str, stores: dict[str, Any]
) -> None:
    async def main() -> None:
        for name in ("redis", "s3"):
            conf = {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}
            policy = SizeThresholdPolicy(reference_above=200_000, store=name)
            async with AIOHybridProducer(conf, policy=policy, stores=stores) as producer:
                await producer.produce(topic, payload(300_000, 5), name.encode())
                with pytest.raises(KafkaException):  # the topic has one partition: the envelope is refused
                    await producer.produce(topic, payload(300_000, 6), b"refused", partition=7)
        consumer = AIOHybridConsumer({**kafka.consumer_config(), "enable.auto.commit": False}, stores=stores)
        await consumer.subscribe([topic])
        got: list[Any] = []
        for _ in range(60):
            got += await consumer.consume(10, 1.0)
            if len(got) >= 2:
                break
        await consumer.close()
        assert {m.key(): sha(m.value()) for m in got} == {k: sha(payload(300_000, 5)) for k in (b"redis", b"s3")}

    asyncio.run(main())
    for store in stores.values():
        assert len(list(store.list_locators(topic))) == 1, "the refused record's payload was rolled back"


# -- gateway gc, credentials from a --command-config file ---------------------------------------
def command_config(tmp_path: Path, s3: SecureS3, *, ca_bundle: bool = True, password: str = PASSWORD) -> str:
    lines = [
        f"redis.username={USER}",
        f"redis.password={password}",
        f"s3.access.key={s3.key_id}",
        f"s3.secret.key={s3.secret}",
    ]
    if ca_bundle:
        lines.append(f"s3.ca.bundle={s3.server.ca_bundle}")
    path = tmp_path / f"client-{uuid.uuid4().hex[:6]}.properties"
    path.touch(mode=0o600)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def gc(*args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "AWS_"))}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "gc", *args],
        cwd=ROOT,
        env={**clean, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_gc_sweeps_orphans_of_both_tls_stores_with_credentials_from_a_file(
    kafka: KafkaService,
    topic: str,
    stores: dict[str, Any],
    tls_redis: RedisServer,
    tls_s3: SecureS3,
    prefix: str,
    tmp_path: Path,
) -> None:
    orphans = {name: store.put(topic, uuid.uuid4(), b"orphaned", pending_since_ms=1) for name, store in stores.items()}
    store_args = [
        "--redis-url", tls_redis.url_for(),  # rediss://host:port/0?ssl_ca_certs=...: no secret in argv
        "--redis-prefix", prefix,
        "--s3-endpoint", str(tls_s3.server.endpoint_url), "--s3-bucket", BUCKET, "--s3-prefix", stores["s3"].prefix,
        "--s3-region", tls_s3.server.region,
    ]  # fmt: skip
    out = gc(*store_args, "--bootstrap", kafka.bootstrap_servers, "--grace", "0", "--delete",
             "--command-config", command_config(tmp_path, tls_s3))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "deleted 2" in out.stdout, out.stdout
    for name, locator in orphans.items():
        with pytest.raises(PayloadNotFoundError):
            stores[name].get(locator, len(b"orphaned"))
    assert_no_secret(out.stdout, out.stderr)

    no_ca = gc(*store_args, "--no-verify", "--command-config", command_config(tmp_path, tls_s3, ca_bundle=False))
    assert no_ca.returncode == 3 and "SSL" in no_ca.stderr and BUCKET in no_ca.stderr, no_ca.stderr
    wrong_config = command_config(tmp_path, tls_s3, password=WRONG_PASSWORD)
    wrong = gc(*store_args, "--no-verify", "--command-config", wrong_config)
    assert wrong.returncode == 3, wrong.stderr
    assert "StoreUnavailableError: Redis at 'rediss://127.0.0.1" in wrong.stderr, wrong.stderr
    assert "authentication failed" in wrong.stderr, wrong.stderr
    no_redis_ca = [*store_args[:1], tls_redis.url_for(ca_certs=False), *store_args[2:]]
    no_redis_ca = gc(*no_redis_ca, "--no-verify", "--command-config", command_config(tmp_path, tls_s3))
    assert no_redis_ca.returncode == 3 and "TLS failed" in no_redis_ca.stderr, no_redis_ca.stderr
    assert_no_secret(no_ca.stdout, no_ca.stderr, wrong.stdout, wrong.stderr, no_redis_ca.stdout, no_redis_ca.stderr)


# -- without the CA, or with a wrong password ---------------------------------------------------
def test_without_the_ca_or_with_a_wrong_password_the_consumer_gets_typed_errors_and_goes_on(
    kafka: KafkaService, topic: str, stores: dict[str, Any], tls_redis: RedisServer, tls_s3: SecureS3
) -> None:
    _produce_references(kafka, topic, stores)
    prefix = stores["redis"].prefix
    s3_prefix = stores["s3"].prefix
    cases = {
        "redis without the CA": (
            {"redis": RedisStore(redis.Redis.from_url(acl_url(tls_redis, ca_certs=False)), prefix=prefix)},
            StoreUnavailableError,
            "TLS failed",
        ),
        "a wrong Redis password": (
            {"redis": RedisStore(redis.Redis.from_url(acl_url(tls_redis, password=WRONG_PASSWORD)), prefix=prefix)},
            StoreUnavailableError,
            "authentication failed",
        ),
        "S3 without the CA": (
            {"s3": S3Store(s3_client(tls_s3, ca_bundle=False), bucket=BUCKET, prefix=s3_prefix)},
            StoreUnavailableError,
            "TLS failed",
        ),
        "a wrong S3 secret key": (  # a refusal that no retry changes: final at once
            {"s3": S3Store(s3_client(tls_s3, secret=WRONG_PASSWORD), bucket=BUCKET, prefix=s3_prefix)},
            StoreError,
            "SignatureDoesNotMatch",
        ),
    }
    for case, (bad, kind, reason) in cases.items():
        with HybridConsumer(kafka.consumer_config(), stores={**stores, **bad}) as consumer:
            consumer.subscribe([topic])
            messages, errors = consume_all(consumer, 3)
        assert [type(e) for e in errors] == [kind], f"{case}: {errors}"
        error = errors[0]
        assert reason in str(error), f"{case}: {error}"
        assert error.kafka_message is not None and error.kafka_message.key() == next(iter(bad)).encode(), case
        assert sorted(m.key() for m in messages) == sorted({b"redis", b"s3", b"plain"} - {next(iter(bad)).encode()})
        assert_no_secret(error, repr(error), error.__cause__, *bad.values())
        for store in bad.values():
            store.close()


def test_a_client_from_a_url_without_the_ca_or_with_a_wrong_password_fails_at_once_masked(
    tls_redis: RedisServer,
) -> None:
    with pytest.raises(StoreUnavailableError, match="TLS failed") as no_ca:
        redis_client_from_url(acl_url(tls_redis, ca_certs=False))
    with pytest.raises(StoreUnavailableError, match="authentication failed") as wrong:
        redis_client_from_url(acl_url(tls_redis, password=WRONG_PASSWORD))
    assert "rediss://gateway:***@127.0.0.1" in str(wrong.value)
    default = tls_redis.url_for(password=ADMIN_PASSWORD)  # the default user is off: only the ACL user gets in
    with pytest.raises(StoreUnavailableError, match="authentication failed"):
        redis_client_from_url(default)
    assert_no_secret(no_ca.value, wrong.value)


def test_the_s3_user_reaches_only_its_prefix_and_nothing_else_gets_in(tls_s3: SecureS3) -> None:
    """The policy is really enforced: the user's key outside ``gw*`` and moto's default keys are refused."""
    import botocore.exceptions

    with pytest.raises(botocore.exceptions.ClientError, match="AccessDenied"):
        s3_client(tls_s3).put_object(Bucket=BUCKET, Key="other-application/x", Body=b"x")
    with pytest.raises(botocore.exceptions.ClientError, match="InvalidAccessKeyId"):
        tls_s3.server.client().list_objects_v2(Bucket=BUCKET)


# -- Spark: the sink writes to both TLS stores, the reader and reconcile read them ---------------
def spark_store_options(tls_redis: RedisServer, tls_s3: SecureS3, stores: dict[str, Any]) -> dict[str, str]:
    return {
        "redis.url": acl_url(tls_redis),
        "redis.prefix": stores["redis"].prefix,
        "s3.endpoint": str(tls_s3.server.endpoint_url),
        "s3.bucket": BUCKET,
        "s3.prefix": stores["s3"].prefix,
        "s3.region": tls_s3.server.region,
        "s3.access.key": tls_s3.key_id,
        "s3.secret.key": tls_s3.secret,
        "s3.ca.bundle": str(tls_s3.server.ca_bundle),
    }


def test_spark_sink_reader_and_reconcile_with_the_tls_stores(
    spark: Any,
    kafka: KafkaService,
    stores: dict[str, Any],
    tls_redis: RedisServer,
    tls_s3: SecureS3,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gateway.cli import main

    topic = f"tls-spark-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=1)
    options = spark_store_options(tls_redis, tls_s3, stores)
    for name in ("redis", "s3"):
        frame = spark.createDataFrame([(name.encode(), payload(300_000, 7))], "key binary, value binary")
        (
            frame.write.format("hybrid-kafka")
            .mode("append")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("topic", topic)
            .option("reference.above", "200000")
            .option("reference.store", name)
            .options(**options)
            .save()
        )
    assert all(len(list(store.list_locators(topic))) == 1 for store in stores.values())

    def reader(**store_options: str) -> Any:  # a DataFrameReader keeps its options: a fresh one per read
        read = spark.read.format("hybrid-kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        return read.option("subscribe", topic).options(**store_options)

    rows = reader(**options).load().select("key", "value", "route").collect()
    assert {bytes(r["key"]): sha(bytes(r["value"])) for r in rows} == {
        k: sha(payload(300_000, 7)) for k in (b"redis", b"s3")
    }
    assert [r["route"] for r in rows] == ["reference", "reference"]

    without_ca = {k: v for k, v in options.items() if k != "s3.ca.bundle"}
    failed = reader(**without_ca).option("failOnDataLoss", "false").load().collect()
    errors = {bytes(r["key"]): r["error"] for r in failed}
    assert errors[b"redis"] is None and "TLS failed" in str(errors[b"s3"]), errors

    orphans = {name: store.put(topic, uuid.uuid4(), b"orphaned", pending_since_ms=1) for name, store in stores.items()}
    args = [
        "reconcile", "--bootstrap", kafka.bootstrap_servers, "--topic", topic, "--grace", "0", "--delete",
        "--redis-url", tls_redis.url_for(username=USER),  # the user in the URL, the password in the file
        "--redis-prefix", stores["redis"].prefix,
        "--s3-endpoint", str(tls_s3.server.endpoint_url), "--s3-bucket", BUCKET, "--s3-prefix", stores["s3"].prefix,
        "--s3-region", tls_s3.server.region, "--command-config", command_config(tmp_path, tls_s3),
    ]  # fmt: skip
    assert main(args) == 0
    report = capsys.readouterr().out
    assert {line.split("deleted: ")[1].strip() for line in report.splitlines() if "deleted: " in line} == set(
        orphans.values()
    ), report
    assert_no_secret(report)
