"""Smoke tests for the servers behind every other test: each one is real, separate and answering."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource

from gateway.testing import (
    BACKEND_CAPABILITIES,
    CAPABILITIES,
    ApacheKafka,
    ApacheKafkaCluster,
    KafkaService,
    RedisServer,
    S3Server,
    ServiceStartError,
    ServiceUnavailable,
    free_port,
)

MB = 1_000_000


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _assert_child_process(pid: int | None, needle: str) -> None:
    assert pid is not None
    assert pid != os.getpid()
    assert needle in _cmdline(pid)


# --------------------------------------------------------------------------------------------
# capability table


def test_capability_table_is_closed_and_complete() -> None:
    assert set(BACKEND_CAPABILITIES) == {"kafka", "kafka3", "mock", "noida", "tansu", "external"}
    for caps in BACKEND_CAPABILITIES.values():
        assert caps <= CAPABILITIES
    assert BACKEND_CAPABILITIES["external"] == CAPABILITIES - {"broker_faults"}
    assert BACKEND_CAPABILITIES["kafka"] == CAPABILITIES  # Apache Kafka itself: nothing is ever skipped on it
    assert "retention" not in BACKEND_CAPABILITIES["mock"]
    assert "size_limit" in BACKEND_CAPABILITIES["noida"]
    assert "benchmarks" in BACKEND_CAPABILITIES["tansu"]


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


# --------------------------------------------------------------------------------------------
# Redis


def test_redis_is_a_real_server(redis_server: RedisServer, redis_client: redis.Redis) -> None:
    if not redis_server.external:
        _assert_child_process(redis_server.pid, "redis-server")
    assert redis_client.ping() is True
    value = os.urandom(MB)
    assert redis_client.set("smoke:1mb", value)
    assert redis_client.get("smoke:1mb") == value
    assert redis_server.server_version().startswith("redis ")


def test_redis_stop_and_start_keep_the_url() -> None:
    try:
        server = RedisServer(from_env=False).start()
    except ServiceUnavailable as exc:
        pytest.skip(exc.reason)
    with server:
        url, first_pid = server.url, server.pid
        client = server.client(socket_timeout=2)
        assert client.set("k", b"v")

        server.stop()
        assert server.pid is None
        with pytest.raises(redis.ConnectionError):
            client.ping()

        server.start()
        assert server.url == url
        assert server.pid is not None and server.pid != first_pid
        _assert_child_process(server.pid, "redis-server")
        assert client.ping() is True  # the same client reconnects to the same URL
        assert redis.Redis.from_url(url).get("k") is None  # no persistence: a restart comes back empty
    assert server.pid is None


# --------------------------------------------------------------------------------------------
# S3


def test_s3_is_a_real_server(s3_server: S3Server, s3_client: Any, s3_bucket: str, s3_prefix: str) -> None:
    if not s3_server.external:
        _assert_child_process(s3_server.pid, "moto")
    body = os.urandom(MB)
    key = f"{s3_prefix}blob"
    s3_client.put_object(Bucket=s3_bucket, Key=key, Body=body)
    assert s3_client.get_object(Bucket=s3_bucket, Key=key)["Body"].read() == body
    listed = s3_client.list_objects_v2(Bucket=s3_bucket, Prefix=s3_prefix)
    assert [(o["Key"], o["Size"]) for o in listed["Contents"]] == [(key, MB)]


# --------------------------------------------------------------------------------------------
# Kafka


def _deliver(producer: Producer, topic: str, value: bytes, **kwargs: Any) -> tuple[KafkaError | None, Message]:
    results: list[tuple[KafkaError | None, Message]] = []
    producer.produce(topic, value=value, on_delivery=lambda err, msg: results.append((err, msg)), **kwargs)
    assert producer.flush(60) == 0
    assert len(results) == 1
    return results[0]


def test_kafka_server_process(kafka: KafkaService) -> None:
    if kafka.name == "external":
        pytest.skip("external cluster: no local process")
    if kafka.name == "mock":
        assert kafka.pid is None  # in process, by design
    elif isinstance(kafka, ApacheKafkaCluster):
        for node in kafka.nodes:
            _assert_child_process(node.pid, "kafka.Kafka")
    else:
        _assert_child_process(kafka.pid, {"kafka": "kafka.Kafka", "noida": "noida-db", "tansu": "tansu"}[kafka.name])
    assert kafka.version
    for host_port in kafka.bootstrap_servers.split(","):
        assert host_port.startswith("127.0.0.1:")


def test_kafka_produce_consume(
    kafka: KafkaService,
    topic: str,
    producer_config: dict[str, Any],
    consumer_config: Callable[..., dict[str, Any]],
) -> None:
    assert "message.max.bytes" in producer_config
    producer = Producer(producer_config)
    value = os.urandom(100_000)
    err, sent = _deliver(producer, topic, value, key=b"k", headers=[("h", b"1")])
    assert err is None, err

    partition = sent.partition()
    assert partition is not None
    consumer = Consumer(consumer_config())
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        got = None
        while got is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got = msg
    finally:
        consumer.close()
    assert got is not None, f"nothing consumed from {topic} on {kafka!r}"
    assert (got.key(), got.headers(), got.offset()) == (b"k", [("h", b"1")], sent.offset())
    assert got.value() == value


@pytest.mark.requires("size_limit")
def test_broker_rejects_oversize_record(topic: str, producer_config: dict[str, Any]) -> None:
    producer = Producer({**producer_config, "message.max.bytes": 2_000_000})

    err, _ = _deliver(producer, topic, b"x" * 1_100_000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err

    err, msg = _deliver(producer, topic, b"y" * 1_000_000)
    assert err is None, err
    offset = msg.offset()
    assert offset is not None and offset >= 0


def test_apache_kafka_that_cannot_start_shows_its_log_and_leaves_nothing() -> None:
    """A broker that refuses its configuration fails fast with its own log in the error, and its folder goes."""
    try:
        broken = ApacheKafka(overrides={"num.partitions": "not-a-number"})
    except ServiceUnavailable as exc:
        pytest.skip(f"Apache Kafka not fetched: {exc.reason}")
    except ServiceStartError as exc:
        text = str(exc)
        assert "num.partitions" in text, text[-2000:]
        leftovers = [p for p in Path(tempfile.gettempdir()).glob("gw-kafka-*") if p.name in text]
        assert leftovers == []
    else:
        broken.close()
        raise AssertionError("a broker with num.partitions=not-a-number started")


def test_apache_kafka_keeps_user_defaults_and_cleans_up() -> None:
    """Defaults users keep stay Kafka's own (size limit 1 048 588); stop removes the process and its storage."""
    try:
        broker = ApacheKafka()
    except ServiceUnavailable as exc:
        pytest.skip(f"Apache Kafka not fetched: {exc.reason}")
    workdir, pid = broker.workdir, broker.pid
    with broker:
        _assert_child_process(pid, "kafka.Kafka")
        assert "message.max.bytes" not in (workdir / "server.properties").read_text()
        configs = broker.admin().describe_configs(
            [ConfigResource(ConfigResource.Type.BROKER, "1")]  # type: ignore[attr-defined]
        )
        (values,) = (f.result(30) for f in configs.values())
        assert values["message.max.bytes"].value == "1048588"
        assert values["group.initial.rebalance.delay.ms"].value == "0"
    assert not workdir.exists()
    assert pid is not None and not Path(f"/proc/{pid}").exists()
