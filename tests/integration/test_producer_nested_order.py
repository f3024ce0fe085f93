"""A ``produce`` called from a delivery callback while a chunked message waits for room in librdkafka's queue.

The queue-full wait serves delivery reports, so an application callback may produce again from
inside another ``produce``. Its record used to go out between the chunked message's segments, so
the consumer saw the later message first; it now goes after the message under way.
"""

from __future__ import annotations

from typing import Any

from gateway import HybridConsumer, HybridProducer
from gateway.testing import KafkaService
from tests.helpers import consume_all

SEGMENT = 10_000


def test_a_record_produced_from_a_callback_during_a_queue_full_wait_keeps_produce_order(
    kafka: KafkaService, topic: str, consumer_config: Any
) -> None:
    conf = kafka.producer_config(
        **{
            # bytes, not messages, bound the queue: the small nested record fits where a segment does not
            "queue.buffering.max.kbytes": 16,
            "max.message.segment.bytes": SEGMENT,
            "large.message.block.ms": 30_000,
            "linger.ms": 0,
        }
    )
    chunked = bytes(range(256)) * 200  # 51 200 bytes: 6 segments, at most one in the queue at a time
    with HybridProducer(conf) as producer:

        def first_delivered(err: Any, msg: Any) -> None:
            assert err is None
            producer.produce(topic, b"third", partition=0)

        producer.produce(topic, b"first", partition=0, on_delivery=first_delivered)
        producer.produce(topic, chunked, partition=0, route="chunked")
        assert producer.flush(30) == 0
    with HybridConsumer(consumer_config(**{"auto.offset.reset": "earliest"})) as consumer:
        consumer.subscribe([topic])
        got, errors = consume_all(consumer, 3)
    assert errors == []
    assert [m.value()[:8] for m in got] == [b"first", chunked[:8], b"third"], "consumed in produce order"
