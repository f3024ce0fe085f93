"""Arguments the consumer refuses before anything reaches librdkafka (no broker needed)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from gateway import HybridConsumer


@pytest.fixture
def consumer() -> Iterator[HybridConsumer]:
    # nothing listens on port 9: the consumer is never connected, only its argument checks run
    c = HybridConsumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "enable.auto.commit": False})
    yield c
    c.close()


@pytest.mark.parametrize("topics", ["t9", b"t9", ("t9",)])
def test_subscribe_takes_a_list_only(consumer: HybridConsumer, topics: object) -> None:
    """Issue 13, defect 7: ``subscribe("t9")`` subscribed to ``t`` and ``9``."""
    with pytest.raises(TypeError, match="list"):
        consumer.subscribe(topics)  # type: ignore[arg-type]


# -- the same as confluent-kafka's Consumer (issue 31) --------------------------------------------

NOWHERE = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "enable.auto.commit": False}


@pytest.mark.parametrize("config", [None, [("group.id", "g")], "group.id=g"])
def test_a_config_that_is_not_a_dict_gets_confluents_type_error(config: object) -> None:
    """``HybridConsumer(None)`` said "'NoneType' object is not iterable"."""
    with pytest.raises(TypeError, match=r"^expected configuration dict$"):
        HybridConsumer(config)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^expected configuration dict$"):
        HybridConsumer()


def test_keyword_arguments_add_to_the_config_as_in_confluent_kafka() -> None:
    only_kwargs = HybridConsumer(**NOWHERE)
    with only_kwargs, HybridConsumer({"group.id": "x", "client.id": "a"}, **NOWHERE) as both:
        assert only_kwargs.assignment() == [] and both.assignment() == []  # group.id came from the keywords


def test_a_hybrid_consumer_is_a_confluent_kafka_consumer() -> None:
    """As ``DeserializingConsumer`` is: frameworks that check the class accept it."""
    import confluent_kafka

    with HybridConsumer(NOWHERE) as consumer:
        assert isinstance(consumer, confluent_kafka.Consumer)
        overridden = {n for n in vars(confluent_kafka.Consumer) if not n.startswith("__")}
        assert all(getattr(type(consumer), n) is not getattr(confluent_kafka.Consumer, n) for n in overridden)


def test_consume_takes_confluents_bounds(consumer: HybridConsumer) -> None:
    """``consume(0)`` raised; ``consume(1000001)`` was accepted (and blocked without a timeout)."""
    assert consumer.consume(0) == []
    assert consumer.consume(num_messages=0, timeout=0) == []
    for n in (-1, 1_000_001):
        with pytest.raises(ValueError, match=r"^num_messages must be between 0 and 1000000 \(1M\)$"):
            consumer.consume(n, 0)


def test_an_asynchronous_commit_of_nothing_returns_none_and_on_commit_hears_no_offset() -> None:
    """An idle consumer on a commit timer crashed: ``commit()`` raised ``_NO_OFFSET``."""
    heard: list[tuple[Any, list[Any]]] = []
    conf = {**NOWHERE, "on_commit": lambda err, partitions: heard.append((err, partitions))}
    with HybridConsumer(conf) as consumer:
        consumer.assign([TopicPartition("t", 0)])
        assert consumer.commit() is None
        assert consumer.commit(message=Message(topic="t", partition=0)) is None  # a message without an offset
        with pytest.raises(KafkaException) as info:
            consumer.commit(asynchronous=False)  # synchronous: _NO_OFFSET, as confluent-kafka's
        assert info.value.args[0].code() == KafkaError._NO_OFFSET
        consumer.poll(0.1)
        assert [(err.code(), partitions) for err, partitions in heard] == [(KafkaError._NO_OFFSET, [])] * 2


def test_a_closed_consumer_refuses_commit_and_store_offsets() -> None:
    """After ``close()``, ``commit()`` raised ``_NO_OFFSET`` and ``store_offsets`` was silently accepted."""
    consumer = HybridConsumer({**NOWHERE, "enable.auto.offset.store": False})
    consumer.close()
    calls = [
        lambda: consumer.commit(),
        lambda: consumer.commit(asynchronous=False),
        lambda: consumer.store_offsets(offsets=[TopicPartition("t", 0, 42)]),
        lambda: consumer.store_offsets(message=Message(topic="t", partition=0, offset=4)),
        lambda: consumer.safe_offsets(),
        lambda: consumer.seek(TopicPartition("t", 0, 0)),
        lambda: consumer.consume(1, 0),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match=r"^Consumer closed$"):
            call()
    consumer.close()  # again: nothing


def test_commit_and_store_offsets_refuse_message_and_offsets_together_in_confluents_words() -> None:
    msg = Message(topic="t", partition=0, offset=3)
    with HybridConsumer({**NOWHERE, "enable.auto.offset.store": False}) as consumer:
        for call in (
            lambda: consumer.commit(message=msg, offsets=[]),
            lambda: consumer.store_offsets(message=msg, offsets=[TopicPartition("t", 0, 4)]),
        ):
            with pytest.raises(ValueError, match=r"^message and offsets are mutually exclusive$"):
                call()
        with pytest.raises(ValueError, match=r"^expected either message or offsets$"):
            consumer.store_offsets()


def test_seek_without_a_reachable_broker_fails_at_once_as_confluents() -> None:
    """It blocked about 30 s reading the committed offset, then raised ``_TIMED_OUT``."""
    with HybridConsumer(NOWHERE) as consumer:
        consumer.assign([TopicPartition("t", 0)])
        started = time.monotonic()
        with pytest.raises(KafkaException, match="Erroneous state") as info:
            consumer.seek(TopicPartition("t", 0, 123))
        assert time.monotonic() - started < 2
        assert info.value.args[0].code() == KafkaError._STATE


def test_a_callback_raising_while_the_consumer_closes_does_not_stop_the_close() -> None:
    """``close()`` re-raised what ``error_cb`` raised (here: brokers down) and the consumer stayed half open."""
    raised: list[str] = []

    def error_cb(err: Any) -> None:
        raised.append(str(err))
        raise RuntimeError("from error_cb")

    conf = {**NOWHERE, "bootstrap.servers": "nonexistent-broker:9092", "socket.timeout.ms": 100, "error_cb": error_cb}
    consumer = HybridConsumer({**conf, "enable.auto.commit": True, "session.timeout.ms": 1000})
    consumer.subscribe(["t"])
    with pytest.raises(RuntimeError, match="from error_cb"):
        consumer.consume(timeout=0.1)  # the application hears it from the call that served the callback
    consumer.close()
    assert raised
    with pytest.raises(RuntimeError, match=r"^Consumer closed$"):
        consumer.commit()
