"""ConnectionRefusals: a failed request is re-raised as the authentication failure heard meanwhile, else as is."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from gateway.librdkafka.refusals import ConnectionRefusals


class Client:
    """Serves the error reports queued for it on ``poll``, as librdkafka does."""

    def __init__(self, refusals: ConnectionRefusals, queued: list[KafkaError]) -> None:
        self.refusals, self.queued = refusals, queued

    def poll(self, timeout: float) -> None:
        for err in self.queued:
            self.refusals(err)
        self.queued = []


FAILED = KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure"))
REFUSED = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: ... invalid credentials")


def test_a_queued_authentication_failure_replaces_the_bare_transport_failure() -> None:
    refusals = ConnectionRefusals()
    queued = [REFUSED, KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")]
    explained = refusals.explain(Client(refusals, queued), FAILED)
    assert explained is not FAILED and explained.args[0].code() == KafkaError._AUTHENTICATION


def test_other_errors_leave_the_failure_as_it_was() -> None:
    refusals = ConnectionRefusals()
    queued = [KafkaError(KafkaError._ALL_BROKERS_DOWN, "down"), KafkaError(KafkaError._TRANSPORT, "refused")]
    assert refusals.explain(Client(refusals, queued), FAILED) is FAILED
