"""What ``produce`` refuses before a reference message's store write (issue 38, point 7), without a broker."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from gateway.core.outgoing import OutgoingMessage
from gateway.errors import ConfigurationError, RecordTooLargeError
from gateway.producer._config import parse_producer_config
from gateway.producer.reference.admission import RECHECK_S, PartitionCounts, ReferenceAdmission
from gateway.protocol.envelope import MAX_ENCRYPTED_ENVELOPE_BYTES
from tests.unit.fake_clock import ManualClock


class Metadata:
    """``Producer.list_topics`` answering from a dict of partition counts (None: the topic has an error)."""

    def __init__(self, counts: dict[str, int | None]) -> None:
        self.counts = counts
        self.asked: list[str] = []

    def __call__(self, topic: str, timeout: float) -> Any:
        self.asked.append(topic)
        if topic not in self.counts:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        count = self.counts[topic]
        described = SimpleNamespace(
            error="UNKNOWN_TOPIC" if count is None else None, partitions=dict.fromkeys(range(count or 0))
        )
        return SimpleNamespace(topics={topic: described})


def test_an_unknown_partition_is_refused_and_a_known_one_costs_no_lookup() -> None:
    clock = ManualClock()
    metadata = Metadata({"t": 3})
    counts = PartitionCounts(metadata, clock.clock())
    counts.check("t", -1)
    assert metadata.asked == [], "no explicit partition: nothing to ask"
    counts.check("t", 2)
    counts.check("t", 0)
    assert metadata.asked == ["t"]
    with pytest.raises(KafkaException) as raised:
        counts.check("t", 3)
    assert raised.value.args[0].code() == KafkaError._UNKNOWN_PARTITION and "has 3 partition(s), not 3" in str(
        raised.value
    )
    metadata.counts["t"] = 5  # partitions added: found at the next lookup once RECHECK_S has passed
    with pytest.raises(KafkaException):
        counts.check("t", 4)
    clock.advance(RECHECK_S)
    counts.check("t", 4)
    assert metadata.asked == ["t", "t"], "a partition beyond the count asks again at most once per RECHECK_S"


def test_a_topic_the_brokers_cannot_describe_refuses_nothing() -> None:
    clock = ManualClock()
    counts = PartitionCounts(Metadata({"new": None}), clock.clock())
    counts.check("new", 9)
    counts.check("unreachable", 9)


def message(key: bytes | None = None, headers: Any = None, partition: int = -1) -> OutgoingMessage:
    return OutgoingMessage.of("t", b"v" * 10, key=key, partition=partition, headers=headers)


def test_a_key_and_headers_without_room_for_the_envelope_are_refused() -> None:
    settings, _ = parse_producer_config({"message.max.bytes": 100_000})
    admission = ReferenceAdmission(settings, PartitionCounts(Metadata({"t": 1}), ManualClock().clock()))
    admission.check(message(b"k" * 90_000))
    limit = 100_000 - 512 - MAX_ENCRYPTED_ENVELOPE_BYTES - 20  # the envelope header, with its framing
    with pytest.raises(RecordTooLargeError) as raised:
        admission.check(message(b"k" * limit, headers={"h": b"v" * 100}))
    error = raised.value
    assert isinstance(error, ConfigurationError) and isinstance(error, KafkaException), "as chunked and plain refuse"
    assert error.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE and "key (" in error.args[0].str()
    with pytest.raises(KafkaException):
        admission.check(message(partition=1))
