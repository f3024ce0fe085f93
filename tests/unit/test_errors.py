"""Typed errors carry the record they concern, as confluent-kafka's ConsumeError does."""

from __future__ import annotations

import pytest

from gateway.errors import (
    GatewayError,
    LargeMessageDroppedError,
    PayloadNotFoundError,
    ProtocolError,
    StoreError,
)


def test_the_record_goes_into_the_constructor() -> None:
    record = object()
    error = PayloadNotFoundError("gone", kafka_message=record)
    assert error.kafka_message is record
    assert str(error) == "gone"
    with pytest.raises(StoreError) as caught:
        raise error
    assert caught.value.kafka_message is record


def test_without_a_record_it_is_none_and_can_be_attached_later() -> None:
    error = ProtocolError("bad bytes")
    assert error.kafka_message is None
    assert isinstance(error, ValueError) and isinstance(error, GatewayError)
    error.kafka_message = "record"
    assert error.kafka_message == "record"


def test_dropped_error_keeps_what_was_dropped_and_the_record() -> None:
    error = LargeMessageDroppedError("evicted", dropped=["m1"], kafka_message="r")
    assert error.dropped == ["m1"] and error.kafka_message == "r"


def test_a_failed_send_is_a_kafka_exception_with_the_kafka_errors_answers() -> None:
    from confluent_kafka import KafkaError, KafkaException

    from gateway.errors import LargeMessageSendError

    cause = KafkaError(KafkaError._MSG_TIMED_OUT, "timed out")
    with pytest.raises(KafkaException) as caught:  # what code around Producer.produce catches
        raise LargeMessageSendError("Sent 1 of 3 segments", cause, sent=1, total=3)
    error = caught.value
    assert isinstance(error, LargeMessageSendError) and str(error) == "Sent 1 of 3 segments"
    assert error.code() == KafkaError._MSG_TIMED_OUT and error.name() == "_MSG_TIMED_OUT"
    assert (error.sent, error.total) == (1, 3)
