"""Whether a failed delivery report may still have left the record in the topic.

librdkafka knows this per message (``rd_kafka_message_status``: not persisted, possibly persisted,
persisted), but confluent-kafka-python 2.x does not expose it on the ``Message`` given to
``on_delivery``, so the answer is taken from the error code alone. The reference route rolls its
store write back only on a *definite* failure; on any other error the envelope may be in the topic
(a timeout after the request went out, a broker that appended and then lost its replicas), and
deleting the payload would turn that envelope into a dangling reference. Doubt keeps the payload
and its pending mark, and ``gateway gc`` decides from the topic.

The list below is therefore an allow-list of codes where nothing was written: the broker refused
the whole batch before appending it, or librdkafka never sent it. Every other code, including ones
added by later versions, counts as possibly persisted.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError

NOT_PERSISTED_CODES: frozenset[int] = frozenset(
    {
        # refused by the broker before any append
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.INVALID_MSG,
        KafkaError.INVALID_RECORD,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_TIMESTAMP,
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        KafkaError.UNSUPPORTED_COMPRESSION_TYPE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.POLICY_VIOLATION,
        KafkaError.NOT_ENOUGH_REPLICAS,  # checked before the append (unlike ..._AFTER_APPEND)
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        # decided locally, before the request was sent
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._QUEUE_FULL,
        KafkaError._PURGE_QUEUE,
        KafkaError._INVALID_ARG,
        KafkaError._BAD_MSG,
        KafkaError._AUTHENTICATION,
    }
)


def may_be_persisted(err: Any) -> bool:
    """True unless ``err`` is a failure that certainly left nothing in the topic.

    ``err`` is what librdkafka passes to ``on_delivery``: ``None`` (delivered: persisted), a
    ``KafkaError``, or anything else a wrapper might pass (treated as doubt).
    """
    if err is None:
        return True
    code = getattr(err, "code", None)
    if not callable(code):
        return True
    try:
        value = code()
    except Exception:  # noqa: BLE001 - an error we cannot read is doubt, never a licence to delete
        return True
    return not (isinstance(value, int) and value in NOT_PERSISTED_CODES)


__all__ = ["NOT_PERSISTED_CODES", "may_be_persisted"]
