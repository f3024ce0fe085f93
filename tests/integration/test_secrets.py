"""Known secrets in every place credentials go, errors forced, and none of them in anything an operator sees.

The secrets are distinctive strings, so a leak anywhere (stderr, stdout, a log record, an exception
text, a ``repr``) is found by a plain substring search. The CLI runs as a real subprocess, so what is
checked is exactly what a terminal or a cron mail would show, librdkafka's own log lines included.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.testing import KafkaService, free_port
from gateway.testing.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
REDIS_SECRET = "redis-pw-Zq81xK"
WRONG_SECRET = "wrong-pw-Lm02yV"
SASL_SECRET = "sasl-pw-Hc73wB"
AWS_SECRET = "aws-secret-Pn55tR"
SECRETS = (REDIS_SECRET, WRONG_SECRET, SASL_SECRET, AWS_SECRET)


def assert_no_secret(*texts: object) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in str(text), f"{secret!r} leaked into: {text}"


@pytest.fixture(scope="module")
def secret_redis() -> Iterator[RedisServer]:
    server = RedisServer(password=REDIS_SECRET, from_env=False)
    try:
        server.start()
    except Exception as exc:
        pytest.skip(f"redis-server: {exc}")
    with server:
        yield server


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
    assert out.returncode == 1, out.stderr
    assert "StoreUnavailableError: Redis at 'redis://:***@127.0.0.1" in out.stderr, out.stderr
    assert_no_secret(out.stdout, out.stderr)


def test_gc_with_an_unreachable_redis_masks_the_password() -> None:
    out = cli("gc", "--redis-url", f"redis://user:{REDIS_SECRET}@127.0.0.1:{free_port()}/0")
    assert out.returncode == 1 and "redis://user:***@127.0.0.1" in out.stderr, out.stderr
    assert_no_secret(out.stdout, out.stderr)


def test_a_malformed_url_is_refused_without_its_password() -> None:
    out = cli("gc", "--redis-url", f"http://:{REDIS_SECRET}@127.0.0.1:1/0")
    assert out.returncode == 2 and "***" in out.stderr, out.stderr
    assert_no_secret(out.stdout, out.stderr)


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
    assert bad.returncode == 1 and "StoreUnavailableError" in bad.stderr, bad.stderr
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
    }
    client = redis_client_from_url(secret_redis.url)
    store = RedisStore(client, prefix="gw")
    keys = {"region_name": "us-east-1", "aws_access_key_id": "AKIATESTTEST", "aws_secret_access_key": AWS_SECRET}
    shown = [
        store,
        client,
        client.connection_pool,
        S3Store(boto3.client("s3", **keys), bucket="gw-bucket"),
        redact_config({**conf, "x": secret_redis.url}),
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
