"""What the consumer does with a record it cannot resolve, and how it keeps repeated warnings short.

One poison record must not stop a partition for good. ``reference.error.policy`` says what
happens once a record has failed ``reference.error.max.attempts`` times (transient errors, of the
store or of the key provider, are retried after ``reference.error.retry.backoff.ms``; an error
that cannot change on retry, such as a malformed envelope, a checksum mismatch or a key the
provider does not have, is final at once):

* ``raise`` (default): the typed error goes to the application (or the record with ``error()``
  set, in ``deliver`` mode) and commits stop at the record until the application commits it;
* ``skip``: the record is counted (``reference.skipped``), logged once, and passed over;
* ``dead-letter``: the record, with its original key, value and headers plus ``_gw.dlq.*``
  headers saying where it came from and why, is written to ``reference.dead.letter.topic`` and
  passed over once the broker has acknowledged it; if that write fails the record is raised
  as under ``raise``, so nothing is lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from confluent_kafka import Producer

from gateway.errors import ConfigurationError, GatewayError, KeyProviderUnavailableError, StoreUnavailableError
from gateway.telemetry.logs import RateLimitedLog as RateLimitedLog  # its home before the producer shared it

log = logging.getLogger(__name__)

T = TypeVar("T")

DLQ_TOPIC_HEADER = "_gw.dlq.topic"
DLQ_PARTITION_HEADER = "_gw.dlq.partition"
DLQ_OFFSET_HEADER = "_gw.dlq.offset"
DLQ_ERROR_HEADER = "_gw.dlq.error"

_PRODUCER_KEYS = ("bootstrap.servers", "client.id", "security.protocol", "sasl.", "ssl.", "socket.", "broker.")
"""The consumer keys that also describe how a dead-letter producer reaches the same cluster."""


class ErrorPolicy(Enum):
    RAISE = "raise"
    SKIP = "skip"
    DEAD_LETTER = "dead-letter"


@dataclass(frozen=True, slots=True)
class UnresolvedSettings:
    policy: ErrorPolicy = ErrorPolicy.RAISE
    max_attempts: int = 1
    backoff_s: float = 0.1
    dead_letter_topic: str | None = None

    def __post_init__(self) -> None:
        if self.policy is ErrorPolicy.DEAD_LETTER and not self.dead_letter_topic:
            raise ConfigurationError("reference.error.policy=dead-letter needs reference.dead.letter.topic")


def retriable(exc: GatewayError) -> bool:
    """Only an unreachable store or key provider may answer differently next time; everything else is final.

    Each part types its own failures as one or the other (a store's client errors in the store, a
    key provider's in :func:`gateway.encryption._provider.ask` and the KMS provider), so this is
    the one place that says which of the two kinds is asked again.
    """
    return isinstance(exc, (StoreUnavailableError, KeyProviderUnavailableError))


def attempt(fetch: Callable[[], T], settings: UnresolvedSettings, sleep: Callable[[float], None] = time.sleep) -> T:
    """``fetch()``, tried up to ``max_attempts`` times while it fails with a retriable error."""
    for tries in range(1, settings.max_attempts + 1):
        try:
            return fetch()
        except GatewayError as exc:
            if tries >= settings.max_attempts or not retriable(exc):
                raise
            sleep(settings.backoff_s * tries)
    raise AssertionError("unreachable: max_attempts >= 1")


class DeadLetters:
    """Writes unresolvable records to the dead-letter topic; the producer is made on first use."""

    def __init__(self, topic: str, consumer_conf: Mapping[str, Any]) -> None:
        self.topic = topic
        self._conf = {k: v for k, v in consumer_conf.items() if k.startswith(_PRODUCER_KEYS)}
        self._conf.update({"enable.idempotence": True, "acks": "all"})
        self._producer: Any = None

    def send(self, msg: Any, exc: GatewayError, timeout: float = 30.0) -> None:
        """Write ``msg`` as it was read, plus where from and why; raises unless the broker acknowledged it."""
        if self._producer is None:
            self._producer = Producer(self._conf)
        headers = [
            *(msg.headers() or ()),
            (DLQ_TOPIC_HEADER, str(msg.topic()).encode()),
            (DLQ_PARTITION_HEADER, str(msg.partition()).encode()),
            (DLQ_OFFSET_HEADER, str(msg.offset()).encode()),
            (DLQ_ERROR_HEADER, f"{type(exc).__name__}: {exc}".encode()[:4096]),
        ]
        outcome: list[Any] = []
        self._producer.produce(
            self.topic,
            value=msg.value(),
            key=msg.key(),
            headers=headers,
            on_delivery=lambda err, _msg: outcome.append(err),
        )
        self._producer.flush(timeout)
        if not outcome or outcome[0] is not None:
            raise StoreUnavailableError(
                f"dead-letter write to {self.topic!r} failed: {outcome[0] if outcome else 'timed out'}",
                kafka_message=msg,
            )

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None
