"""Credentials for the CLI from a properties file and the environment, and the masking every printed URL gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.command import CommandError, client_settings, read_properties
from gateway.config import is_secret_key, mask_url, redact_config


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("rediss://user:pw@host:1/0?password=pw&db=1", "rediss://user:***@host:1/0?password=***&db=1"),
        ("unix:///run/redis.sock?password=pw", "unix:///run/redis.sock?password=***"),
        ("redis://host:1/0", "redis://host:1/0"),
        ("redis://u:p@w@rd@host:1", "redis://u:***@host:1"),
        ("http://[pw@host", "http://[pw:***@host"),
    ],
)
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_secret_keys_and_redaction() -> None:
    for key in ("sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret", "ssl.key.pem", "s3.secret.key"):
        assert is_secret_key(key), key
    for key in ("sasl.username", "bootstrap.servers", "security.protocol"):
        assert not is_secret_key(key), key
    shown = redact_config({"sasl.password": "pw", "redis.url": "redis://:pw@h", "group.id": "g"})
    assert shown == {"sasl.password": "***", "redis.url": "redis://:***@h", "group.id": "g"}


def test_environment_then_file_then_argv(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text(
        "# comment\n! also a comment\n\nsasl.password = from-file\nsasl.username: file-user\n"
        "redis.password=file-redis\nssl.ca.location=/ca=1.pem\n"
    )
    env = {"GATEWAY_KAFKA_SASL_PASSWORD": "from-env", "GATEWAY_KAFKA_SASL_MECHANISM": "PLAIN",
           "GATEWAY_REDIS_URL": "redis://h:1/0", "GATEWAY_OTHER": "x"}  # fmt: skip
    kafka, stores = client_settings(str(path), {"sasl.username": "argv-user"}, env)
    assert kafka == {
        "sasl.password": "from-file",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "argv-user",
        "ssl.ca.location": "/ca=1.pem",
    }
    assert stores == {"redis.url": "redis://h:1/0", "redis.password": "file-redis"}


def test_a_bad_properties_file_is_a_usage_error_without_its_content(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("sasl.password\n")
    with pytest.raises(CommandError, match="line 1: expected key=value") as caught:
        read_properties(str(path))
    assert caught.value.code == 2
    with pytest.raises(CommandError, match="cannot read"):
        read_properties(str(tmp_path / "missing"))
