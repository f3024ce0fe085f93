"""Transactions with large messages on a real broker: an abort takes the store writes with it, and a
consume-transform-produce loop hands the consumer's safe offsets to the transaction."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.testing import KafkaService
from stores import RedisStore
from tests.faults import envelope_locators
from tests.helpers import consume_all, payload, sha

pytestmark = pytest.mark.requires("transactions")

SEGMENT = 100_000
ROOT = Path(__file__).resolve().parents[2]


def _transactional(kafka: KafkaService, store: RedisStore, window: int = 1) -> HybridProducer:
    conf = {
        **kafka.producer_config(),
        "transactional.id": f"tx-{uuid.uuid4().hex[:8]}",
        "max.message.segment.bytes": SEGMENT,
        "reference.write.window": window,
    }
    producer = HybridProducer(
        conf, policy=SizeThresholdPolicy(reference_above=500_000, store="redis"), stores={"redis": store}
    )
    producer.init_transactions(60)
    return producer


def _read_committed(
    kafka: KafkaService, store: RedisStore, topic: str, want: int, group: str | None = None
) -> list[Any]:
    conf = {**kafka.consumer_config(group), "isolation.level": "read_committed", "enable.auto.commit": False}
    with HybridConsumer(conf, stores={"redis": store}) as consumer:
        consumer.subscribe([topic])
        messages, errors = consume_all(consumer, want, timeout=60)
        messages += consumer.consume(50, 3)  # nothing more may come
    assert errors == []
    return messages


def test_an_abort_leaves_no_payload_and_no_visible_record(kafka: KafkaService, topic: str, redis_client: Any) -> None:
    store = RedisStore(redis_client, prefix=f"txn{uuid.uuid4().hex[:6]}")
    with _transactional(kafka, store) as producer:
        producer.begin_transaction()
        producer.produce(topic, payload(300_000), key=b"chunked")
        producer.produce(topic, payload(900_000), key=b"reference")
        producer.produce(topic, b"plain", key=b"plain")
        producer.flush(30)
        assert len(list(store.list_locators(topic))) == 1
        producer.abort_transaction(60)
        assert list(store.list_locators(topic)) == []
        producer.begin_transaction()
        producer.produce(topic, payload(900_000, seed=1), key=b"kept")
        producer.produce(topic, payload(300_000, seed=2), key=b"kept-chunked")
        producer.commit_transaction(60)
        assert len(list(store.list_locators(topic))) == 1
    messages = _read_committed(kafka, store, topic, 2)
    assert {m.key(): sha(m.value()) for m in messages} == {
        b"kept": sha(payload(900_000, seed=1)),
        b"kept-chunked": sha(payload(300_000, seed=2)),
    }


def test_writes_in_flight_belong_to_the_transaction_that_produced_them(
    kafka: KafkaService, topic: str, redis_client: Any
) -> None:
    """No flush before abort or commit: the writes still in the window go into the transaction first."""
    store = RedisStore(redis_client, prefix=f"txw{uuid.uuid4().hex[:6]}")
    with _transactional(kafka, store, window=8) as producer:
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, payload(900_000, seed=i), key=b"aborted")
        producer.abort_transaction(60)
        assert list(store.list_locators(topic)) == [], "the writes in flight were undone with the rest"
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, payload(900_000, seed=10 + i), key=b"%d" % i)
        producer.commit_transaction(60)
        assert len(list(store.list_locators(topic))) == 3 and store.list_pending(2**62) == []
    messages = _read_committed(kafka, store, topic, 3)
    assert [(m.key(), sha(m.value())) for m in messages] == [
        (b"%d" % i, sha(payload(900_000, seed=10 + i))) for i in range(3)
    ]


def test_a_transform_loop_commits_the_consumers_safe_offsets_in_its_transaction(
    kafka: KafkaService, redis_client: Any
) -> None:
    store = RedisStore(redis_client, prefix=f"txn{uuid.uuid4().hex[:6]}")
    source, target = f"tx-in-{uuid.uuid4().hex[:8]}", f"tx-out-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(source, partitions=1)
    kafka.create_topic(target, partitions=1)
    inputs = {b"plain": b"small", b"chunked": payload(250_000), b"reference": payload(800_000)}
    with _transactional(kafka, store) as feeder:
        feeder.begin_transaction()
        for key, value in inputs.items():
            feeder.produce(source, value, key=key)
        feeder.commit_transaction(60)
    group = f"g-{uuid.uuid4().hex[:8]}"
    conf = {**kafka.consumer_config(group), "isolation.level": "read_committed", "enable.auto.commit": False}
    with HybridConsumer(conf, stores={"redis": store}) as consumer, _transactional(kafka, store) as producer:
        consumer.subscribe([source])
        messages, errors = consume_all(consumer, len(inputs), timeout=60)
        assert errors == []
        producer.begin_transaction()
        for msg in messages:
            producer.produce(target, msg.value(), key=msg.key())
        offsets = consumer.safe_offsets()
        assert [tp.offset for tp in offsets] == [messages[-1].offset() + 1]
        assert offsets[0].metadata  # LinkedIn's "<HW>,<metadata>"
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        assert consumer.committed([TopicPartition(source, 0)], timeout=30)[0].offset == messages[-1].offset() + 1
    out = _read_committed(kafka, store, target, len(inputs))
    assert {m.key(): sha(m.value()) for m in out} == {k: sha(v) for k, v in inputs.items()}
    assert _read_committed(kafka, store, source, 0, group) == [], "the group resumes after what was transformed"


def test_a_transform_loop_killed_mid_transaction_delivers_each_input_exactly_once(
    kafka: KafkaService, redis_server: Any, redis_client: Any
) -> None:
    """Killed twice in the middle of a transaction, restarted each time: every input once in the output."""
    prefix = f"txk{uuid.uuid4().hex[:6]}"
    store = RedisStore(redis_client, prefix=prefix)
    source, target = f"txk-in-{uuid.uuid4().hex[:8]}", f"txk-out-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(source, partitions=1)
    kafka.create_topic(target, partitions=1)
    inputs = {}
    for i in range(12):
        size = (200, 250_000, 1_200_000)[i % 3]  # plain, chunked, reference
        inputs[f"k{i:02d}".encode()] = payload(size, seed=i)
    with HybridProducer(
        {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT},
        policy=SizeThresholdPolicy(reference_above=1_000_000, store="redis"),
        stores={"redis": store},
    ) as feeder:
        for key, value in inputs.items():
            feeder.produce(source, value, key=key)
    group, txid = f"g-{uuid.uuid4().hex[:8]}", f"tx-{uuid.uuid4().hex[:8]}"
    command = [
        sys.executable, "-m", "tests.transform_child", "--bootstrap", kafka.bootstrap_servers,
        "--source", source, "--target", target, "--group", group, "--transactional-id", txid,
        "--redis-url", redis_server.url, "--prefix", prefix, "--batch", "4",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for die_after, expected_rc in ((6, 9), (7, 9), (0, 0)):  # mid-transaction twice, then to the end
        done = subprocess.run([*command, "--die-after", str(die_after)], cwd=ROOT, env=env, timeout=300, check=False)
        assert done.returncode == expected_rc
    out = _read_committed(kafka, store, target, len(inputs))
    assert sorted(m.key() for m in out) == sorted(inputs), "each input exactly once"
    assert {m.key(): sha(m.value()) for m in out} == {k: sha(v) for k, v in inputs.items()}
    # the killed transactions' payloads are not referenced by any committed envelope, and they kept their
    # pending marks (an open transaction never clears them), so nothing is lost track of
    live = {locator for _, locator in envelope_locators(kafka, target)}
    orphans = {locator for locator, _ in store.list_locators(target)} - live
    assert orphans and orphans <= set(store.list_pending(2**62))


def _fenced(exc: BaseException) -> bool:
    """Whether ``exc`` is the fatal ``_FENCED`` error. confluent-kafka 2.16's flush raises it inside a
    ``SystemError`` when a delivery callback ran while it was pending (the envelope's has one)."""
    cause = exc if isinstance(exc, KafkaException) else exc.__cause__
    return isinstance(cause, KafkaException) and cause.args[0].code() == KafkaError._FENCED


@pytest.mark.parametrize("kind", ["confluent", "hybrid", "hybrid-reference"])
def test_a_fenced_producer_is_closed_by_its_close_whatever_the_flush_raises(
    kafka: KafkaService, topic: str, redis_client: Any, kind: str
) -> None:
    """A zombie's close raises ``_FENCED`` once and leaves it closed, as confluent-kafka's own Producer
    does: later calls say it is closed, and a second close does not try again."""
    conf = {**kafka.producer_config(), "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"}
    if kind == "confluent":
        producer: Any = Producer(conf)
    else:
        store = RedisStore(redis_client, prefix=f"txf{uuid.uuid4().hex[:6]}")
        producer = _transactional_with(conf, store, window=4)
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"before the fence")
    producer.flush(30)
    newer = Producer(conf)
    newer.init_transactions(60)  # fences the first one
    try:
        producer.produce(topic, payload(600_000) if kind == "hybrid-reference" else b"after the fence")
        with pytest.raises(Exception) as raised:  # which one: checked just below
            producer.close()
        assert _fenced(raised.value), raised.value
        for call in (lambda: producer.produce(topic, b"more"), lambda: producer.flush(1), lambda: producer.poll(0)):
            with pytest.raises(RuntimeError, match="Producer has been closed"):
                call()
        producer.close()  # closed already: nothing is tried, nothing raised
    finally:
        newer.close()


def _transactional_with(conf: dict[str, Any], store: RedisStore, window: int) -> HybridProducer:
    return HybridProducer(
        {**conf, "max.message.segment.bytes": SEGMENT, "reference.write.window": window},
        policy=SizeThresholdPolicy(reference_above=500_000, store="redis"),
        stores={"redis": store},
    )
