"""Which delivery errors may have left the record in the topic (only the others allow a rollback)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from gateway.producer.reference._envelope_delivery import NOT_PERSISTED_CODES, may_be_persisted

POSSIBLY_PERSISTED = [
    KafkaError._MSG_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError._TRANSPORT,
    KafkaError._PURGE_INFLIGHT,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    KafkaError._FATAL,
    KafkaError.UNKNOWN,
    KafkaError._FAIL,
    KafkaError._DESTROY,
]
NOT_PERSISTED = [
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.INVALID_RECORD,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError._QUEUE_FULL,
    KafkaError._PURGE_QUEUE,
    KafkaError._UNKNOWN_PARTITION,
]


@pytest.mark.parametrize("code", POSSIBLY_PERSISTED)
def test_timeouts_and_errors_after_the_send_may_have_written_the_record(code: int) -> None:
    assert may_be_persisted(KafkaError(code))


@pytest.mark.parametrize("code", NOT_PERSISTED)
def test_refusals_before_the_append_wrote_nothing(code: int) -> None:
    assert not may_be_persisted(KafkaError(code))


def test_an_unknown_code_is_doubt() -> None:
    assert 123_456 not in NOT_PERSISTED_CODES
    assert may_be_persisted(KafkaError(123_456))


@pytest.mark.parametrize(
    "err", [None, "broker said no", KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)), object()]
)
def test_anything_that_is_not_a_readable_kafka_error_is_doubt(err: Any) -> None:
    assert may_be_persisted(err)


def test_an_error_whose_code_cannot_be_read_is_doubt() -> None:
    class Broken:
        def code(self) -> int:
            raise RuntimeError("no code")

    assert may_be_persisted(Broken())
