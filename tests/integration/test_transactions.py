"""Transactions with large messages on a real broker: an abort takes the store writes with it, a
consume-transform-produce loop hands the consumer's safe offsets to the transaction, and ``gateway gc``
deletes the payloads of aborted transactions (killed, fenced, or whose undo failed), never an open one's."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.errors import StoreUnavailableError
from gateway.gc.sweeper import SweepReport, kafka_verifier, sweep
from gateway.testing import KafkaService
from stores import RedisStore
from tests.faults import envelope_locators
from tests.helpers import consume_all, payload, sha
from tests.integration.test_gc import run_gc

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
    # their envelopes were aborted when the restarted loop took over the transactional.id: gc deletes them
    report = _gc(kafka, store)
    assert set(report.deleted) == orphans and report.kept == [] and report.landed == [], report
    assert {locator for locator, _ in store.list_locators(target)} == live


# -- gc and aborted transactions (issue 28, point 4) -----------------------------------------------
class FailingDelete(RedisStore):
    """A Redis store whose deletes fail while ``failing`` is set: an abort's undo that could not run."""

    failing = False

    def delete(self, locator: str) -> None:
        if self.failing:
            raise StoreUnavailableError("delete refused by the test")
        super().delete(locator)


def _gc(kafka: KafkaService, store: RedisStore) -> SweepReport:
    return sweep(
        {"redis": store}, grace_ms=0, verifier=kafka_verifier(kafka.client_conf(), timeout_s=60), dry_run=False
    )


def _sent(store: RedisStore, topic: str) -> list[str]:
    return sorted(locator for locator, _ in store.list_locators(topic))


def test_gc_deletes_the_payloads_of_a_killed_transaction_once_it_is_aborted(
    kafka: KafkaService, topic: str, redis_server: Any, redis_client: Any
) -> None:
    """The issue's reproduction: 3 reference messages flushed in a transaction, the producer SIGKILLed.

    While the transaction is open gc keeps the payloads and their marks (before the fix it called
    them landed and cleared the marks); once the next producer with the same transactional.id has
    aborted it, gc deletes them (before: "kept 3 whose envelope landed", and after retention removed
    the records gc examined 0 writes and the payloads stayed for ever).
    """
    prefix, txid = f"txg{uuid.uuid4().hex[:6]}", f"tx-{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_client, prefix=prefix)
    command = [
        sys.executable, "-m", "tests.transaction_child", "--bootstrap", kafka.bootstrap_servers, "--topic", topic,
        "--transactional-id", txid, "--redis-url", redis_server.url, "--prefix", prefix, "--count", "3",
    ]  # fmt: skip
    child = subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "FLUSHED"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    sent = _sent(store, topic)
    assert len(sent) == 3 and sorted(store.list_pending(2**62)) == sent
    gc_args = ["--redis-url", redis_server.url, "--redis-prefix", prefix, "--grace", "0"]
    gc_args += ["--bootstrap", kafka.bootstrap_servers, "--delete"]

    still_open = run_gc(*gc_args)
    assert still_open.returncode == 4, still_open.stdout + still_open.stderr
    assert "deleted 0, kept 0 whose envelope landed, kept 3 unproved" in still_open.stdout
    assert still_open.stdout.count("last stable offset 0: a transaction there is still open") == 3
    assert _sent(store, topic) == sent and sorted(store.list_pending(2**62)) == sent, "payloads and marks kept"

    with HybridProducer({**kafka.producer_config(), "transactional.id": txid}, stores={"redis": store}) as successor:
        successor.init_transactions(60)  # aborts the killed producer's transaction
    assert _read_committed(kafka, store, topic, 0) == []

    aborted = run_gc(*gc_args)
    assert aborted.returncode == 0, aborted.stdout + aborted.stderr
    assert "deleted 3, kept 0 whose envelope landed, kept 0 unproved" in aborted.stdout
    assert aborted.stdout.count("only aborted envelopes point at it") == 3
    assert _sent(store, topic) == [] and store.list_pending(2**62) == []

    watermarks = Consumer(kafka.consumer_config())  # then retention: nothing is left behind for ever
    try:
        high = watermarks.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        watermarks.close()
    for future in kafka.admin().delete_records([TopicPartition(topic, 0, high)]).values():
        future.result(30)
    after = run_gc(*gc_args)
    assert after.returncode == 0 and "examined 0 pending writes" in after.stdout
    assert _sent(store, topic) == []


def test_gc_deletes_what_an_abort_failed_to_undo_and_keeps_what_committed(
    kafka: KafkaService, topic: str, redis_client: Any
) -> None:
    """An abort whose deletes failed: the marks stay (before the fix the producer cleared them after
    the failed undo, and gc then cleared any left as landed), and gc deletes those 3 payloads. The 2
    messages committed after them, marked pending again as if their producer died before clearing,
    are landed: kept whole, marks cleared."""
    store = FailingDelete(redis_client, prefix=f"txf{uuid.uuid4().hex[:6]}")
    with _transactional(kafka, store) as producer:
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, payload(900_000, seed=i), key=b"aborted")
        assert producer.flush(30) == 0
        store.failing = True
        producer.abort_transaction(60)
        store.failing = False
        aborted = _sent(store, topic)
        producer.begin_transaction()
        for i in range(2):
            producer.produce(topic, payload(900_000, seed=10 + i), key=b"c%d" % i)
        producer.commit_transaction(60)
    committed = sorted(set(_sent(store, topic)) - set(aborted))
    assert len(aborted) == 3 and len(committed) == 2
    assert sorted(store.list_pending(2**62)) == aborted, "an aborted write's mark is never cleared"
    for locator in committed:
        store.mark_pending(locator, 1)

    report = _gc(kafka, store)
    assert sorted(report.deleted) == aborted and sorted(report.landed) == committed, report
    assert report.kept == [] and report.exit_code() == 0
    assert all("only aborted envelopes point at it" in report.proofs[locator] for locator in aborted)
    assert _sent(store, topic) == committed and store.list_pending(2**62) == []
    messages = _read_committed(kafka, store, topic, 2)
    assert [sha(m.value()) for m in messages] == [sha(payload(900_000, seed=10 + i)) for i in range(2)]


def test_gc_deletes_the_payloads_of_a_fenced_zombie(kafka: KafkaService, topic: str, redis_client: Any) -> None:
    """Producer A is fenced by B with the same transactional.id: A's transaction is aborted, and A
    can neither commit nor abort (so no undo runs). gc deletes A's 3 payloads, keeps B's message."""
    store = RedisStore(redis_client, prefix=f"txz{uuid.uuid4().hex[:6]}")
    conf = {**kafka.producer_config(), "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"}
    policy = SizeThresholdPolicy(reference_above=500_000, store="redis")
    zombie = HybridProducer(conf, policy=policy, stores={"redis": store})
    zombie.init_transactions(60)
    zombie.begin_transaction()
    for i in range(3):
        zombie.produce(topic, payload(900_000, seed=i), key=b"zombie")
    assert zombie.flush(30) == 0
    fenced = _sent(store, topic)
    with HybridProducer(conf, policy=policy, stores={"redis": store}) as successor:
        successor.init_transactions(60)  # fences the zombie and aborts its transaction
        with pytest.raises(KafkaException):
            zombie.commit_transaction(30)
        with pytest.raises(KafkaException):
            zombie.abort_transaction(30)
        with contextlib.suppress(KafkaException):
            zombie.close()
        successor.begin_transaction()
        successor.produce(topic, payload(900_000, seed=7), key=b"successor")
        successor.commit_transaction(60)
    assert len(fenced) == 3 and sorted(store.list_pending(2**62)) == fenced

    report = _gc(kafka, store)
    assert sorted(report.deleted) == fenced and report.kept == [] and report.exit_code() == 0, report
    assert len(_sent(store, topic)) == 1 and store.list_pending(2**62) == []
    messages = _read_committed(kafka, store, topic, 1)
    assert [(m.key(), sha(m.value())) for m in messages] == [(b"successor", sha(payload(900_000, seed=7)))]


def test_gc_keeps_the_payloads_and_marks_of_an_open_transaction(
    kafka: KafkaService, topic: str, redis_client: Any
) -> None:
    """Envelopes of a transaction still open, and any record after them (past the last stable offset),
    are undecided: payloads and marks kept, exit 4 (before the fix they were landed and their marks
    cleared, so an abort afterwards left the payloads for ever). Once it commits they are landed."""
    store = RedisStore(redis_client, prefix=f"txo{uuid.uuid4().hex[:6]}")
    with _transactional(kafka, store) as producer:
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, payload(900_000, seed=i), key=b"open")
        assert producer.flush(30) == 0
        with HybridProducer(kafka.producer_config(), stores={"redis": store}) as plain:
            plain.produce(topic, payload(900_000, seed=9), key=b"plain", route="reference:redis")
        sent = _sent(store, topic)
        for locator in sent:
            store.mark_pending(locator, 1)  # the plain one as if its producer died before clearing

        report = _gc(kafka, store)
        assert report.deleted == [] and report.landed == [] and report.exit_code() == 4, report
        assert sorted(locator for locator, _ in report.kept) == sent
        assert all("at or past the last stable offset 0" in why for _, why in report.kept), report.kept
        assert sorted(store.list_pending(2**62)) == sent and _sent(store, topic) == sent

        producer.commit_transaction(60)  # clears its own marks
    report = _gc(kafka, store)
    assert len(report.landed) == 1 and report.deleted == [] and report.kept == [], report
    assert _sent(store, topic) == sent and store.list_pending(2**62) == []
    assert len(_read_committed(kafka, store, topic, 4)) == 4


def _fenced(exc: BaseException, kind: str) -> bool:
    """Whether ``exc`` is the fatal ``_FENCED`` error. confluent-kafka 2.16's own flush raises it inside a
    ``SystemError``, or loses it in a bare one, when a delivery callback ran while it was pending; the
    gateway's producer raises the fatal ``KafkaException`` itself (``ExactProducer``)."""
    if kind == "confluent" and isinstance(exc, SystemError) and exc.__cause__ is None:
        return True  # confluent-kafka's own loss, the one ExactProducer repairs
    cause = exc if isinstance(exc, KafkaException) or kind != "confluent" else exc.__cause__
    return isinstance(cause, KafkaException) and cause.args[0].code() == KafkaError._FENCED and cause.args[0].fatal()


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
        assert _fenced(raised.value, kind), raised.value
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
