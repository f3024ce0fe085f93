"""The rules a reader applies to an envelope before it asks a store: its topic, and its declared size."""

from __future__ import annotations

import uuid

import pytest

from gateway.config import DEFAULT_MAX_PAYLOAD_BYTES
from gateway.consumer.config import parse_consumer_config
from gateway.consumer.reference_rules import ReferenceRules, TopicRename, parse_topic_renames
from gateway.errors import ConfigurationError, LocatorTopicError, PayloadTooLargeError
from gateway.protocol.envelope import Envelope
from gateway.spark.options import OptionError, parse_options


def envelope(size: int = 10, locator: str = "orders/x") -> Envelope:
    return Envelope("mem", locator, size, b"\0" * 32, uuid.uuid4())


def test_rename_formats_parse_to_a_prefix_and_a_suffix() -> None:
    assert parse_topic_renames(None) == ()
    assert parse_topic_renames(" source.${topic} , ${topic}.replica,,") == (
        TopicRename("source.", ""),
        TopicRename("", ".replica"),
    )


BAD_FORMATS = ["${topic}", "source.", "a.${topic}.${topic}", "a/${topic}", "${TOPIC}.x", "a ${topic}"]


@pytest.mark.parametrize("bad", BAD_FORMATS)
def test_a_format_that_names_no_rename_is_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="rename format"):
        parse_topic_renames(bad)


def test_a_record_carries_envelopes_of_its_own_topic_only_by_default() -> None:
    rules = ReferenceRules()
    rules.check_topic(envelope(), "orders", "orders")
    rules.check_topic(envelope(), "orders", None)  # a store whose locators name no topic: nothing to check
    with pytest.raises(LocatorTopicError, match=r"'payments'.*'orders'"):
        rules.check_topic(envelope(), "payments", "orders")
    with pytest.raises(LocatorTopicError):
        rules.check_topic(envelope(), "source.orders", "orders")


def test_a_mirror_carries_its_sources_envelopes_and_no_others() -> None:
    rules = ReferenceRules(renames=parse_topic_renames("source.${topic},dr.${topic},${topic}.replica"))
    assert rules.sources("dr.source.orders") == {"dr.source.orders", "source.orders", "orders"}
    assert rules.sources("orders.replica") == {"orders.replica", "orders"}
    assert rules.sources("source.") == {"source."}, "the format must leave a topic inside"
    for topic in ("source.orders", "dr.source.orders", "orders.replica"):
        rules.check_topic(envelope(), topic, "orders")
    refused = (("source.orders", "payments"), ("orders", "source.orders"), ("xsource.orders", "orders"))
    for topic, written_for in refused:
        with pytest.raises(LocatorTopicError):
            rules.check_topic(envelope(), topic, written_for)


def test_a_declared_size_above_the_maximum_is_refused() -> None:
    rules = ReferenceRules(max_payload_bytes=1_000)
    rules.check_size(envelope(1_000))
    with pytest.raises(PayloadTooLargeError, match=r"1001 bytes.*reference\.max\.payload\.bytes=1000"):
        rules.check_size(envelope(1_001))
    with pytest.raises(PayloadTooLargeError):
        ReferenceRules().check_size(envelope(2**41))


def test_the_consumer_and_the_spark_source_read_the_same_keys() -> None:
    settings, conf = parse_consumer_config(
        {"reference.max.payload.bytes": 5_000, "reference.topic.renames": "source.${topic}"}
    )
    expected = ReferenceRules(5_000, (TopicRename("source.", ""),))
    assert settings.reference_rules == expected
    assert "reference.topic.renames" not in conf and "reference.max.payload.bytes" not in conf
    assert parse_consumer_config({})[0].reference_rules == ReferenceRules(DEFAULT_MAX_PAYLOAD_BYTES, ())
    spark = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    renamed = {"reference.max.payload.bytes": "5000", "reference.topic.renames": "source.${topic}"}
    assert parse_options({**spark, **renamed}, streaming=False).reference_rules == expected
    with pytest.raises(OptionError, match="rename format"):
        parse_options({**spark, "reference.topic.renames": "nothing"}, streaming=False)
    with pytest.raises(ConfigurationError):
        parse_consumer_config({"reference.topic.renames": "nothing"})
