"""Why librdkafka could not get in, kept from ``error_cb`` so that the failed request can say so.

A wrong SASL password reaches an application only through ``error_cb`` (``_AUTHENTICATION: SASL
authentication error: ... invalid credentials``); the metadata request that needed the connection
fails meanwhile with a bare ``Broker transport failure``, and an operator told that Kafka is
unreachable looks at the network instead of the password. The library's own metadata connections
(``gateway gc`` and ``reconcile``, the Spark reader's driver) listen with :class:`ConnectionRefusals`
and raise the refusal instead. librdkafka's text names the mechanism, never the password.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException

AUTHENTICATION_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})


class ConnectionRefusals:
    """An ``error_cb`` that keeps the last authentication failure of a client's connections."""

    def __init__(self) -> None:
        self.authentication: KafkaError | None = None

    def __call__(self, err: KafkaError) -> None:
        if err.code() in AUTHENTICATION_CODES:
            self.authentication = err

    def explain(self, client: Any, exc: KafkaException) -> KafkaException:
        """``exc``, or a ``KafkaException`` of the authentication failure librdkafka reported meanwhile.

        ``client`` is polled once, without waiting, to serve the error reports still queued: call this
        only for a client that holds no assignment (an admin client, a metadata-only consumer).
        """
        client.poll(0)
        return exc if self.authentication is None else KafkaException(self.authentication)
