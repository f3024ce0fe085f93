"""``key.serializer`` / ``value.serializer`` and their deserializers, as confluent-kafka's
``SerializingProducer`` and ``DeserializingConsumer`` take them.

They apply to the *whole* value: the producer serializes before the policy routes (so serialized
bytes are what gets chunked or stored), the consumer deserializes after reassembly and store
resolution. Errors are confluent-kafka's own (``KeySerializationError``, ``ValueSerializationError``,
``KeyDeserializationError``, ``ValueDeserializationError``), the latter two carrying the message.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka.error import (
    KeyDeserializationError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from confluent_kafka.serialization import MessageField, SerializationContext

Codec = Callable[[Any, SerializationContext], Any]


def _pop(conf: dict[str, Any], name: str) -> Codec | None:
    codec: Codec | None = conf.pop(name, None)
    if codec is not None and not callable(codec):
        raise TypeError(f"{name} must be a confluent_kafka Serializer/Deserializer or a callable(obj, ctx)")
    return codec


@dataclass(frozen=True, slots=True)
class Serializers:
    key: Codec | None = None
    value: Codec | None = None

    @classmethod
    def pop_from(cls, conf: dict[str, Any]) -> Serializers:
        """Take ``key.serializer`` / ``value.serializer`` out of a producer config (librdkafka refuses them)."""
        return cls(_pop(conf, "key.serializer"), _pop(conf, "value.serializer"))

    def __bool__(self) -> bool:
        return self.key is not None or self.value is not None

    def serialize(self, topic: str, key: Any, value: Any, headers: Any) -> tuple[Any, Any]:
        """Key first, then value, with one context whose field changes, as ``SerializingProducer`` does."""
        ctx = SerializationContext(topic, MessageField.KEY, headers)
        if self.key is not None:
            try:
                key = self.key(key, ctx)
            except Exception as exc:
                raise KeySerializationError(exc) from exc
        ctx.field = MessageField.VALUE
        if self.value is not None:
            try:
                value = self.value(value, ctx)
            except Exception as exc:
                raise ValueSerializationError(exc) from exc
        return key, value


@dataclass(frozen=True, slots=True)
class Deserializers:
    key: Codec | None = None
    value: Codec | None = None

    @classmethod
    def pop_from(cls, conf: dict[str, Any]) -> Deserializers:
        """Take ``key.deserializer`` / ``value.deserializer`` out of a consumer config."""
        return cls(_pop(conf, "key.deserializer"), _pop(conf, "value.deserializer"))

    def __bool__(self) -> bool:
        return self.key is not None or self.value is not None

    def apply(self, msg: Any) -> Any:
        """Deserialize a whole message's key and value in place; error events pass untouched."""
        if msg.error() is not None:
            return msg
        ctx = SerializationContext(msg.topic(), MessageField.KEY, msg.headers())
        key, value = msg.key(), msg.value()
        if self.key is not None:
            try:
                key = self.key(key, ctx)
            except Exception as exc:
                raise KeyDeserializationError(exception=exc, kafka_message=msg) from exc
        if self.value is not None:
            ctx.field = MessageField.VALUE
            try:
                value = self.value(value, ctx)
            except Exception as exc:
                raise ValueDeserializationError(exception=exc, kafka_message=msg) from exc
        msg.set_key(key)
        msg.set_value(value)
        return msg

    def apply_from(self, out: list[Any], start: int, ready: deque[Any]) -> None:
        """Deserialize ``out[start:]``; on a refusal, move the later ones to ``ready`` and raise.

        Those messages were delivered already: the consumer hands them out on its next calls, so a
        refused one never costs the ones behind it.
        """
        for i in range(start, len(out)):
            try:
                self.apply(out[i])
            except (KeyDeserializationError, ValueDeserializationError):
                ready.extend(out[i + 1 :])
                del out[i:]
                raise
