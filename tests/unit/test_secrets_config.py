"""Credentials for the CLI from a properties file and the environment, and the masking every printed URL gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.command import CommandError, client_settings, read_properties
from gateway.config import check_url_userinfo, is_secret_key, mask_url, redact_config


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("rediss://user:pw@host:1/0?password=pw&db=1", "rediss://user:***@host:1/0?password=***&db=1"),
        ("unix:///run/redis.sock?password=pw", "unix:///run/redis.sock?password=***"),
        ("redis://host:1/0", "redis://host:1/0"),
        ("redis://u:p@w@rd@host:1", "redis://u:***@host:1"),
        ("http://[pw@host", "http://***@host"),
        # unencoded '/', '?', '#' end urllib's authority early: the password is still masked whole
        ("redis://user:pa/ss-secret@127.0.0.1:6379/0", "redis://user:***@127.0.0.1:6379/0"),
        ("redis://:pa#ss-secret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://:pa?ss-secret@127.0.0.1:6379/0?db=1", "redis://:***@127.0.0.1:6379/0?db=1"),
        ("rediss://:p/a?s#s:w@o@rd@h:1/0?password=x", "rediss://:***@h:1/0?password=***"),
        ("redis://bare-token/x@h:1", "redis://***@h:1"),
        ("redis://:pw@h/0?client_name=a@b", "redis://:***@b"),  # an '@' further on masks more, never less
        ("user:pa/ss@h:1", "user:***@h:1"),
    ],
)
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown


PIECES = ("Qx7k", "Vb3m", "Hn5p", "Jt2w", "Ld8r")


@pytest.mark.parametrize(
    "password", ["Qx7k/Vb3m", "Qx7k#Vb3m", "Qx7k?Vb3m", "/Qx7k", "Qx7k/Vb3m?Hn5p#Jt2w@Ld8r:Qx7k%Vb3m", "Qx7k@Vb3m"]
)
def test_a_url_whose_password_holds_a_delimiter_is_refused_masked_and_says_to_percent_encode(password: str) -> None:
    """redis-py's own error quoted the piece before the delimiter ("Port could not be cast to integer value as ...")."""
    from urllib.parse import quote

    from gateway.errors import ConfigurationError
    from stores import redis_client_from_url

    url = f"redis://user:{password}@127.0.0.1:1/0"
    assert mask_url(url) == "redis://user:***@127.0.0.1:1/0"
    if any(ch in password for ch in "/?#"):
        with pytest.raises(ConfigurationError) as caught:
            redis_client_from_url(url)
        text = str(caught.value)
        assert "percent-encode" in text and "redis://user:***@127.0.0.1:1/0" in text
        assert not [piece for piece in PIECES if piece in text], text
    encoded = f"redis://user:{quote(password, safe='')}@127.0.0.1:1/0"
    check_url_userinfo(encoded, "Redis URL")  # the remedy is accepted
    check_url_userinfo("unix:///run/a@b/redis.sock?password=x", "Redis URL")  # a socket path, no user info
    assert mask_url(encoded) == "redis://user:***@127.0.0.1:1/0"


def test_secret_keys_and_redaction() -> None:
    for key in (
        "sasl.password",
        "ssl.key.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",  # "clientId=... clientSecret=..."
        "kafka.sasl.oauthbearer.config",
        "ssl.key.pem",
        "s3.secret.key",
    ):
        assert is_secret_key(key), key
    for key in ("sasl.username", "bootstrap.servers", "security.protocol"):
        assert not is_secret_key(key), key
    shown = redact_config({"sasl.password": "pw", "redis.url": "redis://:pw@h", "group.id": "g"})
    assert shown == {"sasl.password": "***", "redis.url": "redis://:***@h", "group.id": "g"}
    oauth = {"sasl.oauthbearer.config": "clientId=c clientSecret=oauth-secret scope=s", "redis.url": "redis://:a/b@h"}
    assert redact_config(oauth) == {"sasl.oauthbearer.config": "***", "redis.url": "redis://:***@h"}


def test_spark_options_reprs_show_no_secret() -> None:
    pytest.importorskip("pyspark")
    from gateway.spark.options import parse_options
    from gateway.spark.sink import parse_sink_options

    options = {
        "kafka.bootstrap.servers": "h:1",
        "kafka.sasl.password": "sasl-secret",
        "kafka.sasl.oauthbearer.config": "clientId=c clientSecret=oauth-secret",
        "redis.url": "redis://:pa/ss-secret@h:1/0",
    }
    source = parse_options({**options, "subscribe": "t"}, streaming=False)
    sink = parse_sink_options({**options, "topic": "t"})
    for shown in (repr(source), repr(sink), str(source)):
        for secret in ("sasl-secret", "oauth-secret", "pa/ss", "ss-secret"):
            assert secret not in shown, shown
    assert "sasl.oauthbearer.config': '***'" in repr(source) and "redis_url='redis://:***@h:1/0'" in repr(source)


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
