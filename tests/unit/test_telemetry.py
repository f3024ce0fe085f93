"""The pure parts of gateway.telemetry: which semconv names, the client's attributes, librdkafka's statistics."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from gateway.telemetry.semconv import ClientInfo, Names, error_type, first_broker, message_key
from gateway.telemetry.statistics import LibrdkafkaStatistics, StatPoint, statistics_points


@pytest.mark.parametrize(
    ("value", "old", "new"),
    [
        (None, True, False),
        ("", True, False),
        ("http", True, False),
        ("messaging", False, True),
        ("http, messaging", False, True),
        ("messaging/dup", True, True),
        ("Messaging/Dup,database", True, True),
    ],
)
def test_opt_in_selects_the_names(value: str | None, old: bool, new: bool) -> None:
    env = {} if value is None else {"OTEL_SEMCONV_STABILITY_OPT_IN": value}
    assert Names.from_env(env) == Names(old=old, new=new)


def test_client_attributes_old_and_new() -> None:
    conf = {"bootstrap.servers": "SASL_SSL://broker-1.example:9093,broker-2:9093", "group.id": "g", "client.id": "c"}
    old = ClientInfo.of(conf, {}).common("t", "process")
    assert old == {
        "messaging.system": "kafka",
        "messaging.destination.name": "t",
        "messaging.operation": "process",
        "messaging.client_id": "c",
        "messaging.kafka.consumer.group": "g",
        "server.address": "broker-1.example",
        "server.port": 9093,
    }
    both = ClientInfo.of(conf, {"OTEL_SEMCONV_STABILITY_OPT_IN": "messaging/dup"})
    attrs = both.common("t", "send")
    assert attrs["messaging.operation"] == "publish" and attrs["messaging.operation.name"] == "send"
    assert attrs["messaging.client.id"] == attrs["messaging.client_id"] == "c"
    assert "messaging.consumer.group.name" not in attrs  # a send has no group
    both.names.put(attrs, "partition", 3)
    assert attrs["messaging.kafka.destination.partition"] == 3 and attrs["messaging.destination.partition.id"] == "3"
    assert both.names.span_name("send", "t") == "send t" and Names().span_name("send", "t") == "t publish"
    assert ClientInfo.of({}, {}).client_id == "rdkafka"  # librdkafka's default


def test_first_broker_key_and_error_type() -> None:
    assert first_broker("h:1,i:2") == ("h", 1)
    assert first_broker("[::1]:9092") == ("::1", 9092)
    assert first_broker("PLAINTEXT://h") == ("h", None)
    assert first_broker("") == (None, None)
    assert message_key(b"user-1") == "user-1" and message_key("s") == "s"
    assert message_key(b"\xff\xfe") is None and message_key(None) is None  # no canonical string: left out
    assert error_type(KafkaError(KafkaError._MSG_TIMED_OUT)) == "_MSG_TIMED_OUT"
    assert error_type(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))) == "UNKNOWN_TOPIC_OR_PART"
    assert error_type(ValueError("x")) == "ValueError"


STATS: dict[str, Any] = {  # the shape librdkafka documents (STATISTICS.md), trimmed
    "name": "rdkafka#consumer-1",
    "msg_cnt": 3,
    "msg_size": 300,
    "replyq": 2,
    "tx_bytes": 1_000,
    "rx_bytes": 5_000,
    "brokers": {
        "h:1/bootstrap": {"name": "h:1/bootstrap", "nodeid": -1, "rtt": {"avg": 0}},
        "h:1/1": {"name": "h:1/1", "nodename": "h:1", "nodeid": 1, "waitresp_cnt": 4, "rtt": {"avg": 2_500}},
        "GroupCoordinator": {"name": "GroupCoordinator", "nodeid": -1, "rtt": {"avg": 9}},
    },
    "topics": {"t": {"partitions": {"0": {"consumer_lag": 7}, "1": {"consumer_lag": -1}, "-1": {"consumer_lag": 0}}}},
}


def test_statistics_become_gauges_in_base_units() -> None:
    assert statistics_points(STATS) == [
        StatPoint("gateway_librdkafka_queue_messages", (), 3),
        StatPoint("gateway_librdkafka_queue_bytes", (), 300),
        StatPoint("gateway_librdkafka_reply_queue_ops", (), 2),
        StatPoint("gateway_librdkafka_tx_bytes_total", (), 1_000),
        StatPoint("gateway_librdkafka_rx_bytes_total", (), 5_000),
        StatPoint("gateway_librdkafka_broker_rtt_seconds", ("h:1",), 0.0025),
        StatPoint("gateway_librdkafka_broker_waiting_requests", ("h:1",), 4),
        StatPoint("gateway_librdkafka_consumer_lag", ("t", "0"), 7),
    ]
    assert statistics_points({}) == []


def test_the_callback_keeps_the_latest_report_and_calls_the_applications_own() -> None:
    seen: list[str] = []
    stats = LibrdkafkaStatistics(chain=seen.append)
    stats("not json")
    assert stats.latest() is None and stats.unreadable == 1
    stats(json.dumps(STATS))
    stats(json.dumps({**STATS, "msg_cnt": 9}))
    latest = stats.latest()
    assert latest is not None and latest["msg_cnt"] == 9 and stats.reports == 2 and len(seen) == 3
