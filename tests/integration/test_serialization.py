"""key/value serializers over all three routes, with confluent-kafka's Schema Registry JSON serde and a
mock registry: the whole serialized value is chunked or stored, and deserialized after reassembly."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.error import KeySerializationError, ValueDeserializationError
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import StringDeserializer, StringSerializer

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.testing import KafkaService
from stores import RedisStore

SCHEMA = """{"type": "object", "title": "Doc", "properties": {"id": {"type": "integer"}, "blob": {"type": "string"}}}"""
SIZES = {"plain": 100, "chunked": 300_000, "reference": 2_000_000}


def _doc(i: int, size: int) -> dict[str, Any]:
    return {"id": i, "blob": chr(ord("a") + i) * size}


def test_schema_registry_serde_over_every_route(kafka: KafkaService, topic: str, redis_client: Any) -> None:
    registry = SchemaRegistryClient.new_client({"url": "mock://serde-test"})  # confluent-kafka's in-memory registry
    store = RedisStore(redis_client, prefix="serde")
    producer = HybridProducer(
        {
            **kafka.producer_config(),
            "max.message.segment.bytes": 100_000,
            "key.serializer": StringSerializer(),
            "value.serializer": JSONSerializer(SCHEMA, registry, lambda obj, ctx: obj),
        },
        policy=SizeThresholdPolicy(reference_above=1_000_000, store="redis"),
        stores={"redis": store},
    )
    with producer:
        for i, (route, size) in enumerate(SIZES.items()):
            producer.produce(topic, _doc(i, size), key=route)
            assert producer.route_for(topic, size + 20).kind.value == route  # the serialized size decides
        with pytest.raises(KeySerializationError):
            producer.produce(topic, _doc(9, 10), key=object())
    assert len(list(store.list_locators(topic))) == 1
    conf = {
        **kafka.consumer_config(),
        "key.deserializer": StringDeserializer(),
        "value.deserializer": JSONDeserializer(SCHEMA, from_dict=lambda d, ctx: d),
    }
    with HybridConsumer(conf, stores={"redis": store}) as consumer:
        consumer.subscribe([topic])
        got: dict[str, Any] = {}
        for _ in range(60):
            for msg in consumer.consume(10, 1.0):
                got[msg.key()] = msg.value()
            if len(got) == len(SIZES):
                break
    assert got == {route: _doc(i, size) for i, (route, size) in enumerate(SIZES.items())}


def test_a_value_the_deserializer_refuses_is_raised_with_its_record_and_loses_nothing(
    kafka: KafkaService, topic: str
) -> None:
    raw = Producer(kafka.producer_config())
    for value in (b"1", b"2", b"not a number", b"4", b"5"):
        raw.produce(topic, value)
    raw.flush(30)

    def to_int(value: bytes, ctx: Any) -> int:
        return int(value)

    with HybridConsumer({**kafka.consumer_config(), "value.deserializer": to_int}) as consumer:
        consumer.subscribe([topic])
        seen: list[int] = []
        refused: list[Any] = []
        for _ in range(60):
            try:
                seen += [m.value() for m in consumer.consume(10, 1.0)]
            except ValueDeserializationError as exc:
                refused.append(exc.kafka_message.value())
            if len(seen) == 4:
                break
    assert seen == [1, 2, 4, 5]
    assert refused == [b"not a number"]
