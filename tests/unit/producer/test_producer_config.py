"""The producer's own configuration keys: defaults, bounds, errors, and what is left for librdkafka."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.producer._config import DEFAULT_SEGMENT_BYTES, RECORD_OVERHEAD, ProducerSettings, parse_producer_config
from gateway.protocol.metadata import CommitEncoding
from gateway.protocol.segments import SEGMENT_HEADER_SIZE

OURS = {
    "max.message.segment.bytes": 100_000, "li.record.header.enable": "true", "header.timestamp.enabled": "0",
    "li.large.message.segment.wrapping.required": True, "large.message.block.ms": "2500",
    "reference.fallback.inline.max.bytes": 5, "store.failure.threshold": "4", "store.failure.window.ms": 10,
    "store.probe.interval.ms": 0,
}  # fmt: skip


def test_defaults_and_everything_else_passes_through() -> None:
    config = {"bootstrap.servers": "b:9092", "linger.ms": 5}
    settings, rest = parse_producer_config(config)
    assert settings == ProducerSettings(segment_bytes=DEFAULT_SEGMENT_BYTES)
    assert rest == config and rest is not config


def test_our_keys_are_read_and_removed_but_message_max_bytes_stays_for_librdkafka() -> None:
    config: dict[str, Any] = {**OURS, "message.max.bytes": 2_000_000, "acks": "all"}
    before = dict(config)
    settings, rest = parse_producer_config(config)
    assert config == before, "the caller's dict is not changed"
    assert rest == {"message.max.bytes": 2_000_000, "acks": "all"}
    assert settings == ProducerSettings(
        segment_bytes=100_000,
        header_only=True,
        timestamp_header=False,
        wrap_small=True,
        block_s=2.5,
        max_message_bytes=2_000_000,
        fallback_cap=5,
        failure_threshold=4,
        failure_window_ms=10,
        probe_interval_ms=0,
    )


@pytest.mark.parametrize("encoding", list(CommitEncoding), ids=lambda e: e.value)
def test_the_commit_metadata_encoding_is_a_setting_and_never_in_what_librdkafka_gets(encoding: CommitEncoding) -> None:
    """librdkafka's producer and the admin client made from the same rest both refuse the key
    ("No such configuration property"), so it is taken out here, not by each client."""
    settings, rest = parse_producer_config({"commit.metadata.encoding": encoding.value.upper(), "acks": "all"})
    assert rest == {"acks": "all"}
    assert settings.commit_encoding is encoding
    assert parse_producer_config({})[0].commit_encoding is CommitEncoding.NUL_TERMINATED
    with pytest.raises(ValueError, match=re.escape("commit.metadata.encoding")):
        parse_producer_config({"commit.metadata.encoding": "utf-8"})


def test_the_segment_size_is_capped_below_message_max_bytes() -> None:
    settings, _ = parse_producer_config({"message.max.bytes": 100_000})
    assert settings.segment_bytes == 100_000 - SEGMENT_HEADER_SIZE - RECORD_OVERHEAD
    header_only, _ = parse_producer_config({"message.max.bytes": 100_000, "li.record.header.enable": True})
    assert header_only.segment_bytes == 100_000 - RECORD_OVERHEAD, "H3 segments carry their header outside the value"


def test_a_message_max_bytes_with_no_room_for_a_segment_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("message.max.bytes=545 leaves no room")):
        parse_producer_config({"message.max.bytes": SEGMENT_HEADER_SIZE + RECORD_OVERHEAD})
    settings, _ = parse_producer_config({"message.max.bytes": SEGMENT_HEADER_SIZE + RECORD_OVERHEAD + 1})
    assert settings.segment_bytes == 1


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("max.message.segment.bytes", "lots", "max.message.segment.bytes must be an integer, got 'lots'"),
        ("max.message.segment.bytes", 0, "max.message.segment.bytes must be >= 1, got 0"),
        ("large.message.block.ms", -1, "large.message.block.ms must be >= 0"),
        ("store.failure.threshold", 0, "store.failure.threshold must be >= 1"),
        ("store.failure.window.ms", None, "store.failure.window.ms must be an integer"),
        ("reference.fallback.inline.max.bytes", -5, "reference.fallback.inline.max.bytes must be >= 0"),
        ("li.record.header.enable", "maybe", "li.record.header.enable must be true or false, got 'maybe'"),
        ("header.timestamp.enabled", 2, "header.timestamp.enabled must be true or false"),
        ("message.max.bytes", "big", "message.max.bytes must be an integer, got 'big'"),
    ],
)
def test_a_bad_value_names_its_key(key: str, value: Any, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        parse_producer_config({key: value})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True),
        ("YES", True),
        (" on ", True),
        ("1", True),
        ("false", False),
        ("No", False),
        ("off", False),
        (0, False),
    ],
)
def test_booleans_as_kafka_clients_accept_them(text: Any, expected: bool) -> None:
    settings, _ = parse_producer_config({"li.large.message.segment.wrapping.required": text})
    assert settings.wrap_small is expected


def test_the_segment_for_a_message_leaves_room_for_its_key_and_headers() -> None:
    settings, _ = parse_producer_config({"message.max.bytes": 10_000, "max.message.segment.bytes": 20_000})
    room = 10_000 - SEGMENT_HEADER_SIZE - RECORD_OVERHEAD
    assert settings.segment_bytes == room
    assert settings.segment_size_for(b"k" * 100, []) == room - 100
    assert settings.segment_size_for(None, []) == room - 16, "no key: room for librdkafka's null framing"
    assert settings.segment_size_for(b"k", [("name", b"value"), ("n", None)]) == room - 1 - (4 + 5 + 10) - (1 + 10)
    assert settings.segment_size_for(b"k" * 20_000, []) == 1, "never below one byte"
    small, _ = parse_producer_config({"max.message.segment.bytes": 1_000})
    assert small.segment_size_for(b"k", []) == 1_000, "the configured size when it fits"


def test_each_store_gets_its_own_health_with_the_configured_thresholds() -> None:
    settings, _ = parse_producer_config(
        {"store.failure.threshold": 7, "store.failure.window.ms": 9, "store.probe.interval.ms": 11}
    )
    a, b = settings.store_health(), settings.store_health()
    assert a is not b
    assert (a.failure_threshold, a.window_ms, a.probe_interval_ms) == (7, 9, 11)


def test_linkedin_producer_keys_are_understood() -> None:
    settings, conf = parse_producer_config(
        {"enable.record.header": "true", "large.message.segment.wrapping.required": True, "max.block.ms": 5000}
    )
    assert (settings.header_only, settings.wrap_small, settings.block_s) == (True, True, 5.0)
    assert not {"enable.record.header", "max.block.ms", "large.message.segment.wrapping.required"} & set(conf)
    assert parse_producer_config({"large.message.enabled": "false"})[0].chunking is False
    assert parse_producer_config({})[0].chunking is True
    with pytest.raises(ValueError, match="say different things"):
        parse_producer_config({"enable.record.header": "true", "li.record.header.enable": "false"})


def test_large_message_enabled_false_sends_what_would_be_chunked_plain() -> None:
    from gateway import HybridProducer, RouteKind

    producer = HybridProducer({"bootstrap.servers": "127.0.0.1:1", "large.message.enabled": "false"})
    assert producer.route_for("t", 5_000_000).kind is RouteKind.PLAIN
    assert HybridProducer({"bootstrap.servers": "127.0.0.1:1"}).route_for("t", 5_000_000).kind is RouteKind.CHUNKED
