"""A key provider that fails: the consumer never hangs, names the part that failed, and loses no record.

A Vault or HSM client raises its own errors (``ConnectionError``), KMS throttles or cannot be
reached for a moment, a key is disabled for good. Each is a typed error carrying the record and
naming the key provider, never the store; the transient ones are retried under
``reference.error.max.attempts`` before ``reference.error.policy`` may pass the record over, the
permanent ones are final at once. Real redis-server, moto's S3 and KMS, Apache Kafka.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import redis
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.encryption import DataKey, KeyProvider, KmsKeyProvider, LocalKeyRing
from gateway.errors import (
    EncryptionError,
    GatewayError,
    KeyProviderUnavailableError,
    KeyUnavailableError,
    StoreError,
)
from gateway.testing import KafkaService, S3Server
from stores import RedisStore, S3Store
from tests.helpers import payload, sha

RING = LocalKeyRing({"k1": bytes(range(32))}, "k1")
POLL_S = 5.0
HUNG_S = 120.0
"""How long a poll(5) may take before the test calls it hung: far beyond any honest answer."""
SKIP_AFTER_5 = {"reference.error.policy": "skip", "reference.error.max.attempts": 5}


class VaultLikeKeys(KeyProvider):
    """A user's provider: the key ring behind a client that raises ``ConnectionError`` while its server is away.

    ``failures`` unwraps fail before the server answers again; ``None``: it never does.
    """

    def __init__(self, failures: int | None) -> None:
        self.failures = failures
        self.unwraps = 0

    def new_data_key(self, context: Mapping[str, str]) -> DataKey:
        return RING.new_data_key(context)

    def unwrap(self, key_id: str, wrapped: bytes, context: Mapping[str, str]) -> bytes:
        self.unwraps += 1
        if self.failures is None or self.unwraps <= self.failures:
            raise ConnectionError("[Errno 111] Connection refused: vault.internal:8200")
        return RING.unwrap(key_id, wrapped, context)


@pytest.fixture
def stores(redis_client: redis.Redis, s3_client: Any, s3_bucket: str, s3_prefix: str) -> dict[str, Any]:
    return {
        "redis": RedisStore(redis_client, prefix=f"gw{uuid.uuid4().hex[:6]}", entry_bytes=1 << 20),
        "s3": S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix),
    }


def write(kafka: KafkaService, topic: str, store: Any, name: str, keys: KeyProvider, values: list[bytes]) -> None:
    """``values`` sealed by reference (above 100 000 bytes) or plain, keyed ``k0``, ``k1``..., in partition 0."""
    with HybridProducer(
        {**kafka.producer_config(), "reference.encryption": "aes256-gcm"},
        policy=SizeThresholdPolicy(reference_above=100_000, store=name),
        stores={name: store},
        key_provider=keys,
    ) as producer:
        for i, value in enumerate(values):
            producer.produce(topic, value, key=f"k{i}".encode(), partition=0)
        assert producer.flush(60) == 0


def reader(consumer_config: Any, topic: str, name: str, store: Any, keys: KeyProvider, **conf: Any) -> HybridConsumer:
    """A consumer of partition 0 from the start, committing only when told."""
    consumer = HybridConsumer(
        consumer_config(**{"enable.auto.commit": False, "reference.error.retry.backoff.ms": 10, **conf}),
        stores={name: store},
        key_provider=keys,
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    return consumer


def bounded(call: Callable[[], Any], what: str = f"poll({POLL_S})") -> Any:
    """What ``call()`` returned or raised, run in a thread the test can give up on.

    A call that has not returned after :data:`HUNG_S` fails the test (and leaves its thread behind):
    that is the hang this file is about, not a timing figure.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HUNG_S)
    assert not thread.is_alive(), f"{what} had not returned after {HUNG_S} s: the consumer hangs"
    return outcome[0]


def poll_bounded(consumer: HybridConsumer, want: int) -> tuple[list[Any], list[GatewayError]]:
    """:func:`poll_once` until ``want`` messages or typed errors came (errors collected, not raised)."""
    got: list[Any] = []
    errors: list[GatewayError] = []
    for _ in range(40):
        if len(got) + len(errors) >= want:
            break
        result = bounded(lambda: consumer.poll(POLL_S))
        if isinstance(result, GatewayError):
            errors.append(result)
        elif isinstance(result, BaseException):
            raise result
        elif result is not None and result.error() is None:
            got.append(result)
    return got, errors


def committed(consumer: HybridConsumer, topic: str) -> int:
    return int(consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)


@pytest.mark.parametrize(
    ("name", "size"),
    [("redis", 200_000), ("redis", 600_000), ("s3", 200_000)],
    ids=["redis-grouped-below-512KiB", "redis-alone-at-600KB", "s3"],
)
def test_a_provider_raising_connection_error_is_a_typed_provider_error_with_its_record_and_poll_returns(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], name: str, size: int
) -> None:
    """Before: Redis below 512 KiB hung poll(5) for good; at 600 KB and on S3, a StoreUnavailableError."""
    values = [payload(size, 1), b"plain after"]
    write(kafka, topic, stores[name], name, RING, values)
    keys = VaultLikeKeys(failures=None)
    consumer = reader(consumer_config, topic, name, stores[name], keys)
    got, errors = poll_bounded(consumer, 2)
    consumer.close()
    assert [m.value() for m in got] == [b"plain after"]
    assert [type(e) for e in errors] == [KeyProviderUnavailableError], errors
    error = errors[0]
    assert isinstance(error, KeyUnavailableError) and isinstance(error, EncryptionError)
    assert not isinstance(error, StoreError), "the store did its part: the key provider failed"
    assert error.kafka_message is not None and error.kafka_message.key() == b"k0"
    assert error.kafka_message.offset() == 0
    assert "key provider" in str(error) and "ConnectionError" in str(error)
    assert isinstance(error.__cause__, ConnectionError)
    assert keys.unwraps == 1  # reference.error.max.attempts defaults to 1


def test_consume_and_the_aio_consumer_return_with_the_provider_s_typed_error(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any]
) -> None:
    """Before: both waited for good on the grouped Redis path, as poll did."""
    import asyncio

    from gateway.aio import AIOHybridConsumer

    write(kafka, topic, stores["redis"], "redis", RING, [payload(200_000, 6), b"plain after"])
    consumer = reader(consumer_config, topic, "redis", stores["redis"], VaultLikeKeys(failures=None))
    got: list[Any] = []
    errors: list[Any] = []
    try:
        for _ in range(20):
            if got and errors:
                break
            result = bounded(lambda: consumer.consume(10, POLL_S), f"consume(10, {POLL_S})")
            if isinstance(result, BaseException):
                errors.append(result)
            else:
                got.extend(result)
    finally:
        consumer.close()
    assert [type(e) for e in errors] == [KeyProviderUnavailableError] and errors[0].kafka_message.key() == b"k0"
    assert [m.value() for m in got] == [b"plain after"]

    async def aio() -> tuple[list[Any], list[Any]]:
        conf = consumer_config(**{"enable.auto.commit": False})
        keys = VaultLikeKeys(failures=None)
        async_consumer = AIOHybridConsumer(conf, stores={"redis": stores["redis"]}, key_provider=keys)
        await async_consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[Any] = []
        errors: list[Any] = []
        try:
            for _ in range(20):
                if got and errors:
                    break
                try:
                    got += await async_consumer.consume(10, POLL_S)
                except GatewayError as exc:
                    errors.append(exc)
            return got, errors
        finally:
            await async_consumer.close()

    result = bounded(lambda: asyncio.run(aio()), f"the aio consumer's consume(10, {POLL_S})")
    assert not isinstance(result, BaseException), result
    got, errors = result
    assert [type(e) for e in errors] == [KeyProviderUnavailableError] and errors[0].kafka_message.key() == b"k0"
    assert [m.value() for m in got] == [b"plain after"]


@pytest.mark.parametrize(("name", "size"), [("redis", 200_000), ("redis", 600_000), ("s3", 200_000)])
def test_a_provider_failing_fewer_times_than_the_attempts_delivers_the_record_and_skips_nothing(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], name: str, size: int
) -> None:
    """Before: with policy skip and 5 attempts, the first failed unwrap skipped the record and the commit passed it."""
    values = [payload(size, 2), b"plain after"]
    write(kafka, topic, stores[name], name, RING, values)
    keys = VaultLikeKeys(failures=3)
    consumer = reader(consumer_config, topic, name, stores[name], keys, **SKIP_AFTER_5)
    try:
        got, errors = poll_bounded(consumer, 2)
        assert not errors and [sha(m.value()) for m in got] == [sha(v) for v in values]
        assert keys.unwraps == 4
        metrics = consumer.metrics()
        assert metrics["reference.skipped"] == 0 and metrics["reference.errors"] == 0
        consumer.commit(asynchronous=False)
        assert committed(consumer, topic) == 2
    finally:
        consumer.close()


def test_a_provider_that_never_answers_is_skipped_only_once_the_attempts_are_spent(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any]
) -> None:
    write(kafka, topic, stores["redis"], "redis", RING, [payload(200_000, 3), b"plain after"])
    keys = VaultLikeKeys(failures=None)
    consumer = reader(
        consumer_config,
        topic,
        "redis",
        stores["redis"],
        keys,
        **SKIP_AFTER_5,
    )
    try:
        got, errors = poll_bounded(consumer, 1)
        assert not errors and [m.value() for m in got] == [b"plain after"]
        assert keys.unwraps == 5
        assert consumer.metrics()["reference.skipped"] == 1
    finally:
        consumer.close()


# -- AWS KMS (moto): a throttled or unreachable Decrypt is retried, a disabled key is final -------------------


class KmsFaults:
    """Counts the KMS client's Decrypt calls and makes the first ones fail as KMS or the network would."""

    def __init__(self, client: Any, faults: list[Callable[[Any], Any]]) -> None:
        self.faults = list(faults)
        self.decrypts = 0
        client.meta.events.register("before-send.kms.Decrypt", self._before_send)

    def _before_send(self, request: Any, **_: Any) -> Any:
        self.decrypts += 1
        return self.faults.pop(0)(request) if self.faults else None


def throttled(request: Any) -> Any:
    """KMS's answer to a request above the account's rate: HTTP 400, ``ThrottlingException``."""
    from botocore.awsrequest import AWSResponse

    class Raw:
        def stream(self, **_: Any) -> Any:
            yield b'{"__type": "ThrottlingException", "message": "Rate exceeded"}'

    headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-RequestId": str(uuid.uuid4())}
    return AWSResponse(request.url, 400, headers, Raw())


def unreachable(request: Any) -> Any:
    from botocore.exceptions import EndpointConnectionError

    raise EndpointConnectionError(endpoint_url=request.url)


@pytest.fixture
def kms(s3_server: S3Server) -> Any:
    if s3_server.external:
        pytest.skip("KMS tests run against moto's server only, never an account")
    # no retries inside botocore: every failed Decrypt reaches the consumer's own retry
    return s3_server.service_client("kms", retries={"total_max_attempts": 1, "mode": "standard"})


@pytest.mark.parametrize("name", ["redis", "s3"])
def test_a_throttled_or_unreachable_kms_is_retried_and_the_record_delivered(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], kms: Any, name: str
) -> None:
    """Before: KeyUnavailableError at the first failed Decrypt; policy skip passed the record over."""
    keys = KmsKeyProvider(kms.create_key()["KeyMetadata"]["Arn"], client=kms)
    values = [payload(200_000, 4), b"plain after"]
    write(kafka, topic, stores[name], name, keys, values)
    faults = KmsFaults(kms, [throttled, unreachable])
    consumer = reader(consumer_config, topic, name, stores[name], keys, **SKIP_AFTER_5)
    try:
        got, errors = poll_bounded(consumer, 2)
        assert not errors and [sha(m.value()) for m in got] == [sha(v) for v in values]
        assert faults.decrypts == 3 and consumer.metrics()["reference.skipped"] == 0
        consumer.commit(asynchronous=False)
        assert committed(consumer, topic) == 2
    finally:
        consumer.close()


def test_a_key_kms_does_not_have_is_final_and_skipped_at_once_by_policy(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], kms: Any, s3_server: S3Server
) -> None:
    """A consumer whose KMS client is in another region than the key: ``NotFoundException``, which no retry changes."""
    import boto3

    keys = KmsKeyProvider(kms.create_key()["KeyMetadata"]["Arn"], client=kms)
    write(kafka, topic, stores["s3"], "s3", keys, [payload(200_000, 5), b"plain after"])
    elsewhere = boto3.client(
        "kms",
        endpoint_url=s3_server.endpoint_url,
        region_name="eu-west-1" if s3_server.region != "eu-west-1" else "us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    faults = KmsFaults(elsewhere, [])
    wrong_region = KmsKeyProvider(keys.key_id, client=elsewhere)
    consumer = reader(consumer_config, topic, "s3", stores["s3"], wrong_region, **SKIP_AFTER_5)
    try:
        got, errors = poll_bounded(consumer, 1)
        assert not errors and [m.value() for m in got] == [b"plain after"]
        assert faults.decrypts == 1, "a key KMS does not have is not asked for again"
        assert consumer.metrics()["reference.skipped"] == 1
        consumer.commit(asynchronous=False)
        assert committed(consumer, topic) == 2
    finally:
        consumer.close()
    raising = reader(consumer_config, topic, "s3", stores["s3"], wrong_region)  # policy raise: the error, the record
    try:
        got, errors = poll_bounded(raising, 2)
        assert [m.value() for m in got] == [b"plain after"]
        assert [type(e) for e in errors] == [KeyUnavailableError], errors
        assert "NotFoundException" in str(errors[0]) and errors[0].kafka_message.key() == b"k0"
    finally:
        raising.close()
