"""Known secrets in every place credentials go, errors forced, and none of them in anything an operator sees.

The secrets are distinctive strings, so a leak anywhere (stderr, stdout, a log record, an exception
text, a ``repr``) is found by a plain substring search. The CLI runs as a real subprocess, so what is
checked is exactly what a terminal or a cron mail would show, librdkafka's own log lines included.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import KafkaService, free_port
from gateway.testing.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
REDIS_SECRET = "redis-pw-Zq81xK"
WRONG_SECRET = "wrong-pw-Lm02yV"
SASL_SECRET = "sasl-pw-Hc73wB"
AWS_SECRET = "aws-secret-Pn55tR"
OAUTH_SECRET = "oauth-secret-Dv19qM"
# a password holding every character that ends a URL's host part early; no piece of it may show
DELIMITED_PIECES = ("Tr58pw", "Gy31sx", "Ku72mq", "Wd90za")
DELIMITED_SECRET = "Tr58pw/Gy31sx#Ku72mq?Wd90za"
SECRETS = (REDIS_SECRET, WRONG_SECRET, SASL_SECRET, AWS_SECRET, OAUTH_SECRET, *DELIMITED_PIECES)
OAUTH_CONFIG = f"clientId=gateway clientSecret={OAUTH_SECRET} scope=kafka"


def assert_no_secret(*texts: object) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in str(text), f"{secret!r} leaked into: {text}"


def _redis_with_password(password: str) -> Iterator[RedisServer]:
    server = RedisServer(password=password, from_env=False)
    try:
        server.start()
    except Exception as exc:
        pytest.skip(f"redis-server: {exc}")
    with server:
        yield server


@pytest.fixture(scope="module")
def secret_redis() -> Iterator[RedisServer]:
    yield from _redis_with_password(REDIS_SECRET)


@pytest.fixture(scope="module")
def delimited_redis() -> Iterator[RedisServer]:
    yield from _redis_with_password(DELIMITED_SECRET)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env={**clean, **(env or {})},
    )


def properties(tmp_path: Path, **settings: str) -> str:
    path = tmp_path / "client.properties"
    path.touch(mode=0o600)
    path.write_text("# credentials\n" + "".join(f"{k.replace('_', '.')}={v}\n" for k, v in settings.items()))
    return str(path)


def test_gc_with_a_wrong_redis_password_names_the_store_and_masks_the_password(secret_redis: RedisServer) -> None:
    url = f"redis://:{WRONG_SECRET}@127.0.0.1:{secret_redis.port}/0"
    out = cli("gc", "--redis-url", url)
    assert out.returncode == 3, out.stderr  # refused credentials: the table's 3, naming Redis
    assert "StoreUnavailableError: Redis at 'redis://:***@127.0.0.1" in out.stderr, out.stderr
    assert_no_secret(out.stdout, out.stderr)


def test_gc_with_an_unreachable_redis_masks_the_password() -> None:
    out = cli("gc", "--redis-url", f"redis://user:{REDIS_SECRET}@127.0.0.1:{free_port()}/0")
    assert out.returncode == 3 and "redis://user:***@127.0.0.1" in out.stderr, out.stderr
    assert_no_secret(out.stdout, out.stderr)


def test_a_malformed_url_is_refused_without_its_password() -> None:
    out = cli("gc", "--redis-url", f"http://:{REDIS_SECRET}@127.0.0.1:1/0")
    assert out.returncode == 2 and "***" in out.stderr, out.stderr
    assert_no_secret(out.stdout, out.stderr)


def test_a_password_with_slash_hash_or_question_mark_is_never_shown_and_the_error_says_to_percent_encode(
    delimited_redis: RedisServer,
) -> None:
    """Unencoded, redis-py read the password as a host and port and quoted part of it ("Port could not be cast to
    integer value as 'Tr58pw'"); refused now, masked, naming the remedy. Percent-encoded, it works."""
    from gateway.errors import ConfigurationError
    from stores import redis_client_from_url

    raw = f"redis://:{DELIMITED_SECRET}@127.0.0.1:{delimited_redis.port}/0"
    given = cli("gc", "--redis-url", raw)
    from_env = cli("gc", env={"GATEWAY_REDIS_URL": raw})
    for out in (given, from_env):
        assert out.returncode == 2, out.stderr
        assert "percent-encode" in out.stderr and "'redis://:***@127.0.0.1:" in out.stderr, out.stderr
    with pytest.raises(ConfigurationError) as caught:
        redis_client_from_url(raw)
    encoded = cli("gc", "--redis-url", delimited_redis.url, "--no-verify")
    assert encoded.returncode == 0 and "examined 0 pending writes" in encoded.stdout, encoded.stderr
    assert_no_secret(given.stdout, given.stderr, from_env.stdout, from_env.stderr, caught.value, repr(caught.value))
    assert_no_secret(encoded.stdout, encoded.stderr)


def test_gc_takes_every_credential_from_a_command_config_file(
    secret_redis: RedisServer, kafka: KafkaService, tmp_path: Path
) -> None:
    """Kafka and Redis credentials from the file: nothing secret on the command line, gc works, nothing leaks."""
    config = properties(
        tmp_path,
        redis_url=f"redis://127.0.0.1:{secret_redis.port}/0",
        redis_password=REDIS_SECRET,
        sasl_username="gateway",
        sasl_password=SASL_SECRET,
    )
    out = cli("gc", "--bootstrap", kafka.bootstrap_servers, "--command-config", config)
    assert out.returncode == 0, out.stderr
    assert "examined 0 pending writes" in out.stdout
    assert_no_secret(out.stdout, out.stderr)


def test_the_environment_supplies_credentials_and_a_wrong_one_is_reported_masked(secret_redis: RedisServer) -> None:
    url = f"redis://127.0.0.1:{secret_redis.port}/0"
    good = cli("gc", "--redis-url", url, "--no-verify", env={"GATEWAY_REDIS_PASSWORD": REDIS_SECRET})
    assert good.returncode == 0, good.stderr
    bad = cli("gc", "--redis-url", url, env={"GATEWAY_REDIS_PASSWORD": WRONG_SECRET})
    assert bad.returncode == 3 and "StoreUnavailableError" in bad.stderr, bad.stderr
    assert_no_secret(good.stdout, good.stderr, bad.stdout, bad.stderr)


def test_reconcile_with_credentials_in_a_file_and_an_unreachable_broker(tmp_path: Path) -> None:
    config = properties(
        tmp_path,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="gateway",
        sasl_password=SASL_SECRET,
        redis_password=REDIS_SECRET,
        s3_access_key="AKIATESTTEST",
        s3_secret_key=AWS_SECRET,
    )
    out = cli(
        "reconcile", "--bootstrap", f"127.0.0.1:{free_port()}", "--topic", "t", "--redis-url", "redis://h:1/0",
        "--command-config", config,
    )  # fmt: skip
    assert out.returncode == 3, out.stderr
    assert_no_secret(out.stdout, out.stderr)


def test_reprs_and_errors_in_process_show_no_secret(
    secret_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    import boto3

    from gateway import HybridConsumer, HybridProducer
    from gateway.config import redact_config
    from gateway.encryption import KmsKeyProvider, LocalKeyRing
    from gateway.errors import GatewayError
    from stores import RedisStore, S3Store, redis_client_from_url

    caplog.set_level(logging.DEBUG)
    conf = {
        "bootstrap.servers": f"127.0.0.1:{free_port()}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "gateway",
        "sasl.password": SASL_SECRET,
        "sasl.oauthbearer.config": OAUTH_CONFIG,  # librdkafka keeps it; PLAIN never uses it
    }
    client = redis_client_from_url(secret_redis.url)
    store = RedisStore(client, prefix="gw")
    keys = {"region_name": "us-east-1", "aws_access_key_id": "AKIATESTTEST", "aws_secret_access_key": AWS_SECRET}
    shown = [
        store,
        client,
        client.connection_pool,
        S3Store(boto3.client("s3", **keys), bucket="gw-bucket"),
        redact_config({**conf, "x": secret_redis.url, "y": f"redis://:{DELIMITED_SECRET}@h:1/0"}),
        KmsKeyProvider("alias/k", client=boto3.client("kms", **keys)),
        LocalKeyRing({"k1": bytes(32)}, "k1"),
    ]
    with HybridProducer(dict(conf)) as producer:
        shown.append(producer)
    consumer = HybridConsumer({**conf, "group.id": "g"})
    shown.append(consumer)
    consumer.close()
    errors: list[BaseException] = []
    for url in (f"redis://:{WRONG_SECRET}@127.0.0.1:{secret_redis.port}/0", f"redis://:{REDIS_SECRET}@127.0.0.1:1/0"):
        with pytest.raises(GatewayError) as caught:
            redis_client_from_url(url, socket_connect_timeout=1)
        errors.append(caught.value)
    assert_no_secret(*(repr(obj) for obj in shown), *(str(e) for e in errors), *(repr(e) for e in errors))
    assert_no_secret(*(record.getMessage() for record in caplog.records))


def _observed(spans: Any, reader: Any) -> list[str]:
    """Every span's name, attributes, events and status, and every metric point's attributes, as text."""
    shown = []
    for span in spans.get_finished_spans():
        shown += [span.name, repr(dict(span.attributes or {})), repr(span.status.description)]
        shown += [f"{event.name} {dict(event.attributes or {})}" for event in span.events]
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                shown += [f"{metric.name} {dict(p.attributes or {})}" for p in metric.data.data_points]
    return shown


def test_traffic_on_every_route_and_a_failing_store_show_no_secret_in_telemetry(
    secret_redis: RedisServer,
    s3_server: Any,
    s3_bucket: str,
    kafka: KafkaService,
    topic: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Plain, chunked, Redis and S3 messages with secrets in every config, then a consumer whose Redis password
    is wrong: no secret in the log, the errors, the spans, the OpenTelemetry and Prometheus metrics, or
    librdkafka's statistics."""
    import boto3
    import redis
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry, generate_latest

    from gateway import HybridConsumer, HybridProducer, tracing
    from gateway.prometheus import GatewayCollector
    from gateway.telemetry.statistics import LibrdkafkaStatistics
    from stores import RedisStore, S3Store
    from tests.helpers import consume_all, payload

    caplog.set_level(logging.DEBUG)
    exporter, reader, provider = InMemorySpanExporter(), InMemoryMetricReader(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    tracing.use_meter_provider(MeterProvider(metric_readers=[reader]))
    # librdkafka takes SASL settings on a PLAINTEXT listener and ignores them: they travel through every config
    secret_conf = {"sasl.username": "gateway", "sasl.password": SASL_SECRET, "statistics.interval.ms": 200}
    keys = {"aws_access_key_id": "AKIATESTTEST", "aws_secret_access_key": AWS_SECRET, "region_name": "us-east-1"}
    s3 = S3Store(boto3.client("s3", endpoint_url=s3_server.endpoint_url, **keys), bucket=s3_bucket, prefix="sec/")
    redis_store = RedisStore(redis.Redis.from_url(secret_redis.url), prefix="sec")
    wrong = RedisStore(redis.Redis.from_url(f"redis://:{WRONG_SECRET}@127.0.0.1:{secret_redis.port}/0"), prefix="sec")
    writer_stats, reader_stats = LibrdkafkaStatistics(), LibrdkafkaStatistics()
    stores = {"redis": redis_store, "s3": s3}
    try:
        producer = HybridProducer(
            {**kafka.producer_config(), **secret_conf, "stats_cb": writer_stats, "max.message.segment.bytes": 100_000},
            stores=stores,
        )
        routes = ("plain", "chunked", "reference:redis", "reference:s3")
        for i, route in enumerate(routes):
            producer.produce(topic, payload(300_000, i), key=b"k", route=route)
        assert producer.flush(60) == 0
        consumer = HybridConsumer(
            {**kafka.consumer_config(), **secret_conf, "stats_cb": reader_stats}, stores={**stores, "redis": wrong}
        )
        consumer.subscribe([topic])
        got, errors = consume_all(consumer, len(routes) + 1, timeout=30)
        deadline = time.monotonic() + 10
        while (writer_stats.latest() is None or reader_stats.latest() is None) and time.monotonic() < deadline:
            producer.poll(0.1)
            consumer.poll(0)
        registry = CollectorRegistry()
        clients = {"writer": producer, "reader": consumer, "redis": redis_store, "s3": s3}
        registry.register(GatewayCollector(clients, {"writer": writer_stats, "reader": reader_stats}))
        scrape = generate_latest(registry).decode()
        shown = [scrape, repr(producer.metrics()), repr(consumer.metrics())]
        shown += [json.dumps(writer_stats.latest()), json.dumps(reader_stats.latest())]
        consumer.close()
        producer.close()
    finally:
        tracing.use_tracer_provider(None)
        tracing.use_meter_provider(None)
    assert {len(m.value()) for m in got} == {300_000} and len(got) == 3, "plain, chunked and S3 arrived"
    assert errors and all("Redis" in str(e) for e in errors), errors  # the wrong password, reported typed
    assert "gateway_librdkafka_tx_bytes_total" in scrape and exporter.get_finished_spans()
    shown += [str(e) for e in errors] + [repr(e) for e in errors] + _observed(exporter, reader)
    assert_no_secret(*shown, *(record.getMessage() for record in caplog.records))


def test_a_spark_read_with_secrets_in_its_options_shows_none_in_its_plan_or_its_failure(
    spark: Any, secret_redis: RedisServer, kafka: KafkaService, topic: str
) -> None:
    """Spark shows a data source's plan, and a failed job's text, in its UI and logs: both stay clean."""
    import contextlib
    import io

    from gateway import HybridProducer
    from stores import RedisStore, redis_client_from_url

    with HybridProducer(
        kafka.producer_config(), stores={"redis": RedisStore(redis_client_from_url(secret_redis.url), prefix="sp")}
    ) as producer:
        producer.produce(topic, b"x" * 5000, key=b"k", route="reference:redis")
        assert producer.flush(30) == 0
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "kafka.sasl.username": "gateway",
        "kafka.sasl.password": SASL_SECRET,
        "kafka.sasl.oauthbearer.config": OAUTH_CONFIG,
        "subscribe": topic,
        "redis.url": f"redis://:{WRONG_SECRET}@127.0.0.1:{secret_redis.port}/0",
        "redis.prefix": "sp",
    }
    frame = spark.read.format("hybrid-kafka").options(**options).load()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        frame.explain("extended")
    shown = [printed.getvalue(), frame._jdf.queryExecution().toString()]
    try:
        shown += [repr(row) for row in frame.collect()]
    except Exception as exc:  # the wrong password fails the job; its text is what an operator reads
        shown += [str(exc), repr(exc)]
    assert any("***" in text or "Redis" in text for text in shown[2:]), shown[2:]
    assert_no_secret(*shown)
