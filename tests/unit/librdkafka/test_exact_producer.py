"""``ExactProducer`` raises the fatal error confluent-kafka's ``flush`` loses, and nothing else in its place."""

from __future__ import annotations

import ctypes
import os
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from gateway.librdkafka.binding import RD_KAFKA_PRODUCER, Librdkafka, client_handle
from gateway.producer._outbox import ExactProducer
from gateway.protocol.metadata import CommitEncoding


class LosesTheError(Producer):
    """confluent-kafka 2.16's flush of a fenced producer, at its worst: a bare ``SystemError``."""

    def flush(self, *args: Any, **kwargs: Any) -> int:
        raise SystemError("<built-in method flush> returned NULL without setting an exception")


class Repaired(ExactProducer, LosesTheError):
    pass


def test_a_fatal_error_lost_in_flush_is_raised_as_the_fatal_kafka_exception() -> None:
    producer = Repaired({"bootstrap.servers": "127.0.0.1:1"}, CommitEncoding.NUL_TERMINATED)
    with pytest.raises(SystemError):  # no fatal error behind it: passed on untouched
        producer.flush(0)
    lib = Librdkafka.get()
    assert lib is not None
    handle = client_handle(lib, producer, RD_KAFKA_PRODUCER)
    assert handle is not None
    raise_fatal = ctypes.CDLL(lib.path, mode=os.RTLD_NOLOAD | os.RTLD_NOW).rd_kafka_test_fatal_error
    raise_fatal.argtypes, raise_fatal.restype = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p], ctypes.c_int
    raise_fatal(handle, KafkaError._FENCED, b"fenced by a newer instance, for this test")
    with pytest.raises(KafkaException) as raised:
        producer.flush(0)
    error = raised.value.args[0]
    assert error.code() == KafkaError._FENCED and error.fatal() and "for this test" in error.str()
    assert isinstance(raised.value.__cause__, SystemError)
