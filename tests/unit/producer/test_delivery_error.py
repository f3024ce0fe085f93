"""What ``on_delivery`` receives (issue 38, point 6): a ``KafkaError`` on every route, the typed cause kept."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from gateway.errors import (
    ConfigurationError,
    DeliveryError,
    EncryptionError,
    LargeMessageSendError,
    MessageTooLargeError,
    RecordTooLargeError,
    StoreError,
    StoreNotConfiguredError,
    StoreUnavailableError,
)
from gateway.producer._delivery_error import delivery_error


def timed_out() -> StoreUnavailableError:
    try:
        try:
            raise TimeoutError("timed out")
        except OSError as exc:
            raise StoreUnavailableError("Redis is unreachable: Timeout reading from socket") from exc
    except StoreUnavailableError as exc:
        return exc


@pytest.mark.parametrize(
    ("failure", "code", "retriable"),
    [
        (StoreUnavailableError("Redis is unreachable: connection refused"), KafkaError._TRANSPORT, True),
        (timed_out(), KafkaError._MSG_TIMED_OUT, True),
        (BufferError("Local: Queue full"), KafkaError._QUEUE_FULL, True),
        (MessageTooLargeError("too large"), KafkaError.MSG_SIZE_TOO_LARGE, False),
        (StoreNotConfiguredError("no such store"), KafkaError._INVALID_ARG, False),
        (ConfigurationError("bad"), KafkaError._INVALID_ARG, False),
        (StoreError("Redis error: WRONGTYPE"), KafkaError._APPLICATION, False),
        (EncryptionError("cannot seal"), KafkaError._APPLICATION, False),
        (RuntimeError("a defect"), KafkaError._APPLICATION, False),
        (KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, "gone")), KafkaError._UNKNOWN_PARTITION, False),
        (RecordTooLargeError("key too large"), KafkaError.MSG_SIZE_TOO_LARGE, False),
        (
            LargeMessageSendError("Sent 1 of 3 segments.", KafkaError(KafkaError._MSG_TIMED_OUT, retriable=True), 1, 3),
            KafkaError._MSG_TIMED_OUT,
            True,
        ),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else None,
)
def test_every_failure_becomes_a_kafka_error_answering_the_usual_idioms(
    failure: BaseException, code: int, retriable: bool
) -> None:
    err: Any = delivery_error(failure)
    assert isinstance(err, KafkaError) and isinstance(err, DeliveryError)
    assert err.code() == code and err == code and err.name() == KafkaError(code).name()
    assert err.retriable() is retriable and err.fatal() is False and err.txn_requires_abort() is False
    assert err.cause is failure, "the typed error stays reachable"
    assert str(failure) in err.str() or err.str() == KafkaError(code, str(failure)).str() or err.str() in str(err)
    assert str(err) and err.str() in str(err)


def test_a_record_too_large_error_survives_pickling() -> None:
    again = pickle.loads(pickle.dumps(RecordTooLargeError("key (5 bytes)")))
    assert isinstance(again, RecordTooLargeError) and again.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert again.args[0].str() == "key (5 bytes)"


def test_librdkafkas_own_errors_pass_unchanged() -> None:
    own = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    assert delivery_error(own) is own and delivery_error(None) is None


def test_a_delivery_error_compares_as_librdkafkas_own_do() -> None:
    err = DeliveryError(KafkaError._TRANSPORT, "store down", cause=StoreUnavailableError("down"), retriable=True)
    plain = KafkaError(KafkaError._TRANSPORT)
    assert err == err and err == plain and plain == err and err == KafkaError._TRANSPORT
    assert err != KafkaError._MSG_TIMED_OUT and (err != plain) is False
    assert {err: 1}[plain] == 1 and err.str() == "store down"
    assert "DeliveryError" in repr(err) and "StoreUnavailableError" in repr(err)
    with pytest.raises(KafkaException) as raised:  # how confluent_kafka.aio raises a failed delivery
        raise KafkaException(err)
    assert raised.value.args[0].cause.args == ("down",)
    again = pickle.loads(pickle.dumps(err))  # across processes, as a multiprocessing pool passes it
    assert again == err and again.retriable() and again.str() == "store down" and str(again.cause) == "down"


def test_a_chunked_failure_names_the_segments_and_the_first_error() -> None:
    first = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large")
    err: Any = delivery_error(
        LargeMessageSendError("Error when sending large message. Sent 0 of 2 segments.", first, 0, 2)
    )
    assert err.str() == "Error when sending large message. Sent 0 of 2 segments.: Broker: Message size too large"
    assert (err.cause.sent, err.cause.total, err.cause.cause) == (0, 2, first)
