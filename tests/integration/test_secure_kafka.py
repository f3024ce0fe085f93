"""Every client of the library against Apache Kafka that requires SASL/SCRAM-SHA-512 over TLS (issue 32).

One broker of this module's own (a SASL_SSL listener, a CA and a server certificate made by the test
set-up, one SCRAM user created when its storage is formatted) serves every test. Clients are given
only the SASL_SSL address, so whatever connection of the library's own drops the application's
security settings (the producer's admin connection that learns ``cleanup.policy``, ``gateway gc``
and ``reconcile``, the Spark reader and sink on executors, the aio clients) cannot reach the broker
and fails its test. Without credentials, or with a wrong password, each client reports the failure
once, typed, naming authentication, and the secret appears in no error text, log or stderr.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.aio import AIOHybridConsumer, AIOHybridProducer
from gateway.testing import ApacheKafka, RedisServer, S3Server, ScramTls, ServiceUnavailable
from gateway.testing.tls import make_tls_files
from stores import RedisStore, S3Store
from tests.helpers import consume_all, payload, sha

pytestmark = [
    pytest.mark.requires("broker_faults"),  # a broker of the module's own, configured for SASL_SSL
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas"),
]

ROOT = Path(__file__).resolve().parents[2]
USER = "gw-app"
SECRET = "scram-pw-Tq48nJ"
WRONG = "wrong-pw-Vd19sK"
SEGMENT = 100_000
SIZES = {b"plain": 1_000, b"chunked": 350_000, b"redis": 1_500_000, b"s3": 1_600_000}
"""Plain, chunked (segment 100 000), and by reference to each store (above 1 MB)."""
POLICY = SizeThresholdPolicy(reference_above=1_000_000, store="redis")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    """One SASL_SSL broker for the module: a broker start costs 10-20 s here."""
    scram = ScramTls(make_tls_files(tmp_path_factory.mktemp("tls")), USER, SECRET)
    try:
        node = ApacheKafka(secure=scram)
    except ServiceUnavailable as exc:
        pytest.fail(f"Apache Kafka is needed for the SASL/SCRAM tests: {exc.reason}")
    with node:
        yield node


@pytest.fixture
def topic(secure: ApacheKafka) -> str:
    name = f"sec-{uuid.uuid4().hex[:10]}"
    secure.create_topic(name, partitions=1)
    return name


@dataclass
class Stores:
    redis: RedisStore
    s3: S3Store
    options: dict[str, str]  # the same stores as hybrid-kafka / CLI options

    def as_dict(self) -> dict[str, Any]:
        return {"redis": self.redis, "s3": self.s3}


@pytest.fixture
def stores(redis_server: RedisServer, s3_server: S3Server) -> Stores:
    tag = uuid.uuid4().hex[:8]
    bucket = s3_server.bucket or s3_server.create_bucket(f"gw-sec-{tag}")
    options = {
        "redis.url": redis_server.url,
        "redis.prefix": f"gwsec{tag}",
        "s3.bucket": bucket,
        "s3.prefix": f"gw-sec-{tag}/",
        "s3.region": s3_server.region,
    }
    if s3_server.endpoint_url:
        options["s3.endpoint"] = s3_server.endpoint_url
    if not s3_server.external:
        options.update({"s3.access.key": "testing", "s3.secret.key": "testing"})
    redis = RedisStore(redis_server.client(), prefix=options["redis.prefix"])
    return Stores(redis, S3Store(s3_server.client(), bucket=bucket, prefix=options["s3.prefix"]), options)


def _produce_every_route(producer: HybridProducer, topic: str) -> None:
    for key, size in SIZES.items():
        route = f"reference:{key.decode()}" if key in (b"redis", b"s3") else None
        producer.produce(topic, payload(size, seed=size), key=key, route=route)
    assert producer.flush(60) == 0


def _expected() -> dict[bytes, str]:
    return {key: sha(payload(size, seed=size)) for key, size in SIZES.items()}


def assert_no_secret(*texts: object) -> None:
    for text in texts:
        for secret in (SECRET, WRONG):
            assert secret not in str(text), f"{secret!r} leaked into: {text}"


# -- with credentials ------------------------------------------------------------------------------


def test_every_route_round_trips_and_the_producers_admin_connection_learns_the_policy(
    secure: ApacheKafka, topic: str, stores: Stores
) -> None:
    """Plain, chunked, Redis and S3 references byte-identical; ``prepare_topics`` asks over SASL_SSL."""
    conf = secure.producer_config(**{"max.message.segment.bytes": SEGMENT})
    with HybridProducer(conf, policy=POLICY, stores=stores.as_dict()) as producer:
        # the admin connection is the producer's second client: it must carry the same settings
        assert producer.prepare_topics([topic], timeout=20) == {topic: "delete"}
        _produce_every_route(producer, topic)
    consumer = HybridConsumer(secure.consumer_config(), stores=stores.as_dict())
    try:
        consumer.subscribe([topic])
        got, errors = consume_all(consumer, len(SIZES), timeout=60)
    finally:
        consumer.close()
    assert errors == []
    assert {m.key(): sha(m.value()) for m in got} == _expected()
    assert len(list(stores.redis.list_locators(topic))) == 1 and len(list(stores.s3.list_locators(topic))) == 1


def test_a_transaction_with_consumer_offsets_commits_over_sasl_ssl(
    secure: ApacheKafka, topic: str, stores: Stores
) -> None:
    target = f"sec-out-{uuid.uuid4().hex[:8]}"
    secure.create_topic(target, partitions=1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    conf = secure.producer_config(**{"max.message.segment.bytes": SEGMENT})
    with HybridProducer(conf, policy=POLICY, stores=stores.as_dict()) as feeder:
        _produce_every_route(feeder, topic)
    consumer = HybridConsumer(secure.consumer_config(group, **{"enable.auto.commit": False}), stores=stores.as_dict())
    txconf = {**conf, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"}
    try:
        consumer.subscribe([topic])
        inputs, errors = consume_all(consumer, len(SIZES), timeout=60)
        assert errors == [] and len(inputs) == len(SIZES)
        with HybridProducer(txconf, policy=POLICY, stores=stores.as_dict()) as producer:
            producer.init_transactions(30)
            producer.begin_transaction()
            for msg in inputs:
                producer.produce(target, msg.value(), key=msg.key())
            producer.send_offsets_to_transaction(consumer.safe_offsets(), consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
        assert committed == max(m.offset() for m in inputs) + 1
    finally:
        consumer.close()
    reader = HybridConsumer(secure.consumer_config(**{"isolation.level": "read_committed"}), stores=stores.as_dict())
    try:
        reader.subscribe([target])
        out, errors = consume_all(reader, len(SIZES), timeout=60)
    finally:
        reader.close()
    assert errors == [] and {m.key(): sha(m.value()) for m in out} == _expected()


def test_the_aio_clients_round_trip_every_route(secure: ApacheKafka, topic: str, stores: Stores) -> None:
    conf = secure.producer_config(**{"max.message.segment.bytes": SEGMENT})

    async def main() -> None:
        async with AIOHybridProducer(conf, policy=POLICY, stores=stores.as_dict()) as producer:
            sent = [
                producer.produce(
                    topic, payload(size, seed=size), key, route=f"reference:{key.decode()}" if size > 1e6 else None
                )
                for key, size in SIZES.items()
            ]
            delivered = await asyncio.gather(*sent)
            assert all(m.error() is None for m in delivered)
        consumer = AIOHybridConsumer(secure.consumer_config(), stores=stores.as_dict())
        await consumer.subscribe([topic])
        got: list[Any] = []
        for _ in range(60):
            got += await consumer.consume(10, 1.0)
            if len(got) >= len(SIZES):
                break
        await consumer.close()
        assert {m.key(): sha(m.value()) for m in got} == _expected()

    asyncio.run(main())


def _properties(tmp_path: Path, settings: dict[str, str]) -> str:
    path = tmp_path / "client.properties"
    path.touch(mode=0o600)
    path.write_text("# the application's Kafka settings\n" + "".join(f"{k}={v}\n" for k, v in settings.items()))
    return str(path)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _security(secure: ApacheKafka, **overrides: str) -> dict[str, str]:
    """The client settings apart from ``bootstrap.servers``, as a properties file carries them."""
    conf = {k: str(v) for k, v in secure.client_conf(**overrides).items() if k != "bootstrap.servers"}
    return conf


def test_gc_reads_the_topic_over_sasl_ssl_with_the_command_config(
    secure: ApacheKafka, topic: str, stores: Stores, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Landed envelopes are proved over SASL_SSL: kept; a write whose envelope never came is deleted."""
    conf = secure.producer_config()
    with HybridProducer(conf, stores={"redis": stores.redis}) as producer:
        for i in range(3):
            producer.produce(topic, payload(20_000, seed=i), key=b"k", route="reference:redis")
        assert producer.flush(30) == 0
    live = sorted(loc for loc, _ in stores.redis.list_locators(topic))
    for locator in live:
        stores.redis.mark_pending(locator, 1)  # a producer that died before clearing its marks
    dead = stores.redis.put(topic, uuid.uuid4(), b"orphaned payload", pending_since_ms=1)
    config = _properties(tmp_path, _security(secure))
    prefix = stores.options["redis.prefix"]
    out = _cli(
        "gc", "--redis-url", redis_server.url, "--redis-prefix", prefix, "--grace", "0",
        "--bootstrap", secure.bootstrap_servers, "--command-config", config, "--delete",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "deleted 1, kept 3 whose envelope landed" in out.stdout, out.stdout
    assert sorted(loc for loc, _ in stores.redis.list_locators(topic)) == live and dead not in live
    assert_no_secret(out.stdout, out.stderr)


@pytest.mark.spark
def test_the_spark_sink_reader_and_reconcile_work_over_sasl_ssl(
    spark: Any,
    secure: ApacheKafka,
    topic: str,
    stores: Stores,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sink takes librdkafka's keys, the reader the Java client's (JAAS, PEM trust store), as users give them."""
    from gateway.cli import main

    scram = _security(secure)
    sink_kafka = {f"kafka.{k}": v for k, v in scram.items()}
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{USER}" password="{SECRET}";'
    reader_kafka = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": jaas,
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": scram["ssl.ca.location"],
    }
    rows = [(key, payload(size, seed=size)) for key, size in SIZES.items()]
    (
        spark.createDataFrame(rows, "key binary, value binary")
        .write.format("hybrid-kafka")
        .mode("append")
        .option("kafka.bootstrap.servers", secure.bootstrap_servers)
        .option("topic", topic)
        .option("max.message.segment.bytes", str(SEGMENT))
        .option("reference.above", "1000000")
        .option("reference.store", "s3")
        .options(**sink_kafka, **stores.options)
        .save()
    )
    frame = (
        spark.read.format("hybrid-kafka")
        .option("kafka.bootstrap.servers", secure.bootstrap_servers)
        .option("subscribe", topic)
        .options(**reader_kafka, **stores.options)
        .load()
    )
    got = frame.select("key", "value", "route").collect()
    assert {bytes(r["key"]): sha(bytes(r["value"])) for r in got} == _expected()
    assert sorted(r["route"] for r in got) == ["chunked", "plain", "reference", "reference"]

    orphan = stores.s3.put(topic, uuid.uuid4(), b"no envelope points here")
    time.sleep(0.01)  # --grace 0: written strictly before "now"
    for env, key in (("AWS_ACCESS_KEY_ID", "s3.access.key"), ("AWS_SECRET_ACCESS_KEY", "s3.secret.key")):
        if key in stores.options:  # the CLI takes S3 credentials from the environment, as boto3 does
            monkeypatch.setenv(env, stores.options[key])
    config = _properties(tmp_path, scram)
    args = [
        "reconcile", "--bootstrap", secure.bootstrap_servers, "--topic", topic, "--grace", "0",
        "--s3-bucket", stores.options["s3.bucket"], "--s3-prefix", stores.options["s3.prefix"],
        "--s3-region", stores.options["s3.region"], "--command-config", config,
    ]  # fmt: skip
    if "s3.endpoint" in stores.options:
        args += ["--s3-endpoint", stores.options["s3.endpoint"]]
    assert main(args) == 0
    report = capsys.readouterr()
    assert f"orphan: s3 {orphan}" in report.out, report.out
    assert_no_secret(report.out, report.err)


# -- without credentials, or with a wrong password ---------------------------------------------------


def _codes(heard: list[KafkaError]) -> set[int]:
    return {err.code() for err in heard}


def test_a_wrong_password_reaches_the_applications_error_cb_as_an_authentication_failure(
    secure: ApacheKafka, topic: str, stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    """librdkafka retries a refused login (a rotated password may arrive): what the application hears is
    ``_AUTHENTICATION`` in its ``error_cb``, and a delivery report that fails once ``message.timeout.ms`` passes."""
    caplog.set_level(logging.DEBUG)
    heard: list[KafkaError] = []
    delivered: list[Any] = []
    conf = secure.producer_config(**{"sasl.password": WRONG, "error_cb": heard.append, "message.timeout.ms": 3000})
    with HybridProducer(conf, stores=stores.as_dict()) as producer:
        producer.produce(topic, b"small", on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(10) == 0
    assert [err.code() for err in delivered] == [KafkaError._MSG_TIMED_OUT]
    assert KafkaError._AUTHENTICATION in _codes(heard)
    assert _codes(heard) <= {KafkaError._AUTHENTICATION, KafkaError._ALL_BROKERS_DOWN}, heard

    told: list[KafkaError] = []
    conf = {**secure.consumer_config(), "sasl.password": WRONG, "error_cb": told.append}
    consumer = HybridConsumer(conf, stores=stores.as_dict())
    try:
        consumer.subscribe([topic])
        got, errors = consume_all(consumer, 1, timeout=3)
    finally:
        consumer.close()
    assert got == [] and errors == []
    assert KafkaError._AUTHENTICATION in _codes(told)
    assert _codes(told) <= {KafkaError._AUTHENTICATION, KafkaError._ALL_BROKERS_DOWN}, told
    texts = [err.str() for err in heard + told]
    assert all("SASL authentication error" in e.str() for e in heard + told if e.code() == KafkaError._AUTHENTICATION)
    assert_no_secret(*texts, *(r.getMessage() for r in caplog.records))


def test_the_aio_clients_hear_a_wrong_password_as_an_authentication_failure(
    secure: ApacheKafka, topic: str, stores: Stores
) -> None:
    heard: list[KafkaError] = []
    conf = secure.producer_config(**{"sasl.password": WRONG, "error_cb": heard.append, "message.timeout.ms": 3000})

    async def main() -> None:
        async with AIOHybridProducer(conf, stores=stores.as_dict()) as producer:
            with pytest.raises(KafkaException) as refused:
                await producer.produce(topic, b"small")
            assert refused.value.args[0].code() == KafkaError._MSG_TIMED_OUT
            assert_no_secret(refused.value)

    asyncio.run(main())
    assert KafkaError._AUTHENTICATION in _codes(heard)
    assert_no_secret(*(err.str() for err in heard))


def test_sasl_without_a_username_and_password_is_refused_at_construction(secure: ApacheKafka) -> None:
    """A config that asks for SCRAM but carries no credentials fails at once, not at the first send."""
    conf = {k: v for k, v in secure.client_conf().items() if k not in ("sasl.username", "sasl.password")}
    makers = (
        lambda: HybridProducer(dict(conf)),
        lambda: HybridConsumer({**conf, "group.id": "g"}),
        lambda: AIOHybridProducer(dict(conf)),
        lambda: AIOHybridConsumer({**conf, "group.id": "g"}),
    )
    for make in makers:
        with pytest.raises(KafkaException) as refused:
            make()
        err = refused.value.args[0]
        assert err.code() == KafkaError._INVALID_ARG and "sasl.username and sasl.password must be set" in err.str()


def test_gc_and_reconcile_name_a_wrong_password_in_one_line(
    secure: ApacheKafka, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Before: ``cannot reach Kafka at ...: Broker transport failure``, which sends the operator to the network."""
    wrong = _properties(tmp_path, _security(secure, **{"sasl.password": WRONG}))
    kafka = ("--bootstrap", secure.bootstrap_servers, "--redis-url", redis_server.url)
    runs = {
        "gc": _cli("gc", *kafka, "--command-config", wrong),
        "reconcile": _cli("reconcile", *kafka, "--topic", "t", "--command-config", wrong),
    }
    for name, out in runs.items():
        assert out.returncode == 3, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert lines[0].startswith(f"gateway {name}: error: Kafka at {secure.bootstrap_servers} refused the client's")
        assert "SASL authentication error" in lines[0] and "invalid credentials" in lines[0], lines[0]
        assert_no_secret(out.stdout, out.stderr)

    plain = _properties(tmp_path, {"client.id": "no-security"})  # a client that speaks PLAINTEXT to the TLS port
    out = _cli("gc", *kafka, "--command-config", plain)
    assert out.returncode == 3 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert f"cannot reach Kafka at {secure.bootstrap_servers}" in out.stderr


@pytest.mark.spark
def test_a_spark_read_with_a_wrong_password_fails_naming_authentication(
    spark: Any, secure: ApacheKafka, topic: str, stores: Stores
) -> None:
    """Before: the planning failed after 30 s with ``Broker transport failure``."""
    options = {f"kafka.{k}": v for k, v in _security(secure, **{"sasl.password": WRONG}).items()}
    reader = (
        spark.read.format("hybrid-kafka")
        .option("kafka.bootstrap.servers", secure.bootstrap_servers)
        .option("subscribe", topic)
        .options(**options, **stores.options)
    )
    with pytest.raises(Exception) as failed:  # Spark wraps the Python source's error in its own
        reader.load().collect()
    text = str(failed.value)
    assert "_AUTHENTICATION" in text and "SASL authentication error" in text, text[-3000:]
    assert_no_secret(text)
