"""RedisStore on a real Redis Cluster (three masters, three replicas): layout, journal across masters,
gc, the reference route end to end, and master failover with and without lost writes."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.consumer.resolver import Resolver
from gateway.errors import (
    GatewayError,
    LocatorError,
    LocatorTopicError,
    PayloadNotFoundError,
    PayloadTooLargeError,
    StoreUnavailableError,
)
from gateway.gc.sweeper import kafka_verifier, sweep
from gateway.protocol.envelope import Envelope, envelope_header
from gateway.testing import KafkaService, RedisClusterServer, free_port
from gateway.testing.redis_cluster import ClusterNode
from stores import RedisStore
from stores.redis._layout import REDIS_MAX_STRING, RedisLocator, bucket_head, bucket_of
from tests.helpers import consume_all, payload
from tests.integration.test_reference_e2e import round_trip
from tests.kafkautil import read_partition

TOPIC = "orders.v1"
SIZE = 8_000
"""Small, so that the messages chunked while the store fails stay far below the mock broker's 5 MiB
per-partition retention; by reference or not, the path through the store is the same."""


@pytest.fixture
def cluster_store(redis_cluster_client: Any) -> RedisStore:
    return RedisStore(redis_cluster_client, prefix=f"gw{uuid.uuid4().hex[:6]}")


def keys_per_master(cluster: RedisClusterServer, prefix: str) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for node in cluster.master_nodes():
        with node.client() as c:
            out[node.port] = sorted(c.scan_iter(match=f"{prefix}:*", count=1000))
    return out


def all_keys(cluster: RedisClusterServer, prefix: str) -> list[bytes]:
    return sorted(k for keys in keys_per_master(cluster, prefix).values() for k in keys)


# -- layout ---------------------------------------------------------------------------------------


def test_one_payload_lives_in_one_slot_and_payloads_spread_over_every_master(
    redis_cluster: RedisClusterServer, cluster_store: RedisStore
) -> None:
    from redis.crc import key_slot

    store = RedisStore(cluster_store.client, prefix=cluster_store.prefix, entry_bytes=1000)
    assert store.layout == "slotted"
    locators = [store.put(TOPIC, uuid.uuid4(), os.urandom(5500), pending_since_ms=1) for _ in range(60)]
    for locator in locators:
        parsed = store.validate_locator(locator)
        keys = [*parsed.keys(store.prefix), parsed.pending_key(store.prefix), parsed.index_key(store.prefix)]
        assert len(keys) == 8 and len({key_slot(k.encode()) for k in keys}) == 1
        assert locator.startswith(f"{bucket_head(store.prefix, bucket_of(parsed.message_id))}:{TOPIC}:")
        assert len(store.get(locator, expected_size=5500)) == 5500
    per_master = keys_per_master(redis_cluster, store.prefix)
    assert len(per_master) == 3 and all(per_master.values()), "every master holds some payloads"
    assert (
        sum(len(v) for v in per_master.values())
        == len({b for loc in locators for b in _bucket_keys(store, loc)}) + 60 * 6
    )


def _bucket_keys(store: RedisStore, locator: str) -> list[str]:
    parsed = store.validate_locator(locator)
    return [parsed.pending_key(store.prefix), parsed.index_key(store.prefix)]


def test_put_is_one_transaction_on_the_owning_master(
    redis_cluster: RedisClusterServer, cluster_store: RedisStore
) -> None:
    mid = uuid.uuid4()
    owner = redis_cluster.master_of_key(bucket_head(cluster_store.prefix, bucket_of(mid)))

    def stats() -> dict[int, dict[str, int]]:
        return {
            n.port: {
                c: int(n.info("commandstats").get(f"cmdstat_{c}", {}).get("calls", 0))
                for c in ("multi", "exec", "set", "zadd")
            }
            for n in redis_cluster.master_nodes()
        }

    before = stats()
    locator = cluster_store.put(TOPIC, mid, b"payload", pending_since_ms=1_000)
    after = stats()
    delta = {port: {c: after[port][c] - before[port][c] for c in after[port]} for port in after}
    assert delta[owner.port] == {"multi": 1, "exec": 1, "set": 1, "zadd": 2}
    assert all(d == {"multi": 0, "exec": 0, "set": 0, "zadd": 0} for p, d in delta.items() if p != owner.port)
    assert cluster_store.list_pending(1_001) == [locator]


def test_journal_and_index_are_listed_across_every_master(
    redis_cluster: RedisClusterServer, cluster_store: RedisStore
) -> None:
    marked = {cluster_store.put("a", uuid.uuid4(), b"p", pending_since_ms=1_000 + i): 1_000 + i for i in range(40)}
    quiet = [cluster_store.put("b", uuid.uuid4(), b"q") for _ in range(20)]
    owners = {redis_cluster.master_of_key(loc.split("}")[0] + "}").port for loc in marked}
    assert len(owners) == 3, "the marks are spread over all three masters"
    assert cluster_store.list_pending(10**15) == sorted(marked, key=marked.__getitem__), "oldest first"
    assert cluster_store.list_pending(1_010) == sorted(marked, key=marked.__getitem__)[:10]
    assert {loc for loc, _ in cluster_store.list_locators()} == set(marked) | set(quiet)
    assert {loc for loc, _ in cluster_store.list_locators("b")} == set(quiet)
    assert list(cluster_store.list_locators("c")) == []
    first = sorted(marked)[:25]
    cluster_store.clear_pending_many(first)  # one pipeline, split by master
    assert set(cluster_store.list_pending(10**15)) == set(marked) - set(first)


def test_gc_sweeps_every_master(
    kafka: KafkaService, topic: str, redis_cluster: RedisClusterServer, cluster_store: RedisStore
) -> None:
    """Orphans (pending, never sent) on all masters are deleted; payloads whose envelope landed stay."""
    producer = HybridProducer(kafka.producer_config(), stores={"redis": cluster_store})
    for i in range(12):
        producer.produce(topic, payload(200_000, i), route="reference:redis")
    assert producer.flush(30) == 0
    landed = {loc for loc, _ in cluster_store.list_locators()}
    assert len(landed) == 12
    for locator in sorted(landed)[:4]:
        cluster_store.mark_pending(locator, 1)  # acknowledged, but the mark was never cleared
    orphans = {cluster_store.put(topic, uuid.uuid4(), payload(300_000), pending_since_ms=1) for _ in range(30)}
    assert len({redis_cluster.master_of_key(o.split("}")[0] + "}").port for o in orphans}) == 3
    report = sweep({"redis": cluster_store}, grace_ms=0, verifier=kafka_verifier(kafka.client_conf()), dry_run=False)
    assert set(report.deleted) == orphans and set(report.landed) == set(sorted(landed)[:4]) and not report.failed
    assert report.complete, report.kept
    assert cluster_store.list_pending(2**62) == []
    assert {loc for loc, _ in cluster_store.list_locators()} == landed
    data = [k for k in all_keys(redis_cluster, cluster_store.prefix) if not k.endswith((b":pending", b":written"))]
    assert len(data) == 12, "only the landed payloads' entries are left, on whichever master"


def test_flat_locators_and_flat_layout_are_refused_on_a_cluster(
    redis_cluster: RedisClusterServer, cluster_store: RedisStore
) -> None:
    mid = uuid.uuid4()
    flat = f"{cluster_store.prefix}:{TOPIC}:{mid}#1x100"
    wrong_bucket = f"{bucket_head(cluster_store.prefix, (bucket_of(mid) + 1) % 1024)}:{TOPIC}:{mid}#1x100"
    masters = redis_cluster.master_nodes()
    data_commands = ("get", "mget", "unlink", "del", "zrem", "zadd", "zrangebyscore")

    def calls() -> int:
        return sum(
            int(n.info("commandstats").get(f"cmdstat_{c}", {}).get("calls", 0)) for n in masters for c in data_commands
        )

    before = calls()
    for locator in (flat, wrong_bucket, flat.replace(":", ":{}:", 1), "gw:{0a}:t:x#1x1"):
        for call in (cluster_store.get, cluster_store.delete, cluster_store.clear_pending):
            with pytest.raises(LocatorError):
                call(locator)
    assert calls() == before, "refused before any I/O"
    with pytest.raises(ValueError, match="slotted"):
        RedisStore(cluster_store.client, layout="flat")
    with pytest.raises(ValueError, match="decode_responses"):
        RedisStore(redis_cluster.client(decode_responses=True))


def test_fetch_ahead_reads_from_every_master_in_parallel(
    redis_cluster: RedisClusterServer, cluster_store: RedisStore
) -> None:
    """The consumer's resolver calls ``get`` from its worker threads on one shared cluster client."""
    values = [payload(300_000 + i, i) for i in range(48)]
    envelopes = []
    for value in values:
        mid = uuid.uuid4()
        envelopes.append(
            Envelope.for_payload(value, store="redis", locator=cluster_store.put(TOPIC, mid, value), message_id=mid)
        )
    resolver = Resolver({"redis": cluster_store}, workers=8, budget=10**9)
    try:
        assert all(resolver.prefetch(i, env) for i, env in enumerate(envelopes))
        got = [resolver.resolve(i, env, topic=TOPIC) for i, env in enumerate(envelopes)]
    finally:
        resolver.close()
    assert got == values
    assert resolver.counters["prefetched"] == 48 and resolver.counters["errors"] == 0


def test_a_forged_size_or_a_copied_envelope_is_refused_before_the_cluster_is_asked(cluster_store: RedisStore) -> None:
    """The resolver's rules hold for every store: a size above ``reference.max.payload.bytes`` and a
    payload written for another topic are refused without a read (reads count ``gets``/``not_found``)."""
    mid = uuid.uuid4()
    entry = REDIS_MAX_STRING - 1  # the largest entries a locator may claim: 4096 of them is about 2 TiB
    size = 4096 * entry
    locator = RedisLocator(TOPIC, mid, 4096, entry, bucket_of(mid)).text(cluster_store.prefix)
    cluster_store.validate_locator(locator, size)  # a locator the store itself would read
    forged = Envelope("redis", locator, size, b"\x00" * 32, mid)
    value = payload(2_000)
    copied = Envelope.for_payload(
        value, store="redis", locator=cluster_store.put(TOPIC, uuid.uuid4(), value), message_id=uuid.uuid4()
    )
    before = cluster_store.metrics()
    resolver = Resolver({"redis": cluster_store})
    try:
        with pytest.raises(PayloadTooLargeError):
            resolver.resolve(0, forged, topic=TOPIC)
        with pytest.raises(LocatorTopicError):
            resolver.resolve(1, copied, topic="another.topic")
        after = cluster_store.metrics()
        assert (after["gets"], after["not_found"], after["errors"]) == (before["gets"], 0, before["errors"])
        assert resolver.resolve(2, copied, topic=TOPIC) == value
    finally:
        resolver.close()


# -- reference route end to end -------------------------------------------------------------------


def test_20mb_round_trip_on_the_cluster(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_cluster: RedisClusterServer, cluster_store: RedisStore
) -> None:
    round_trip(kafka, topic, consumer_config, {"redis": cluster_store}, "redis", [20_000_000, 3_000_000, 5_000_000])


@pytest.mark.slow
def test_200mb_round_trip_on_the_cluster(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_cluster: RedisClusterServer, cluster_store: RedisStore
) -> None:
    round_trip(kafka, topic, consumer_config, {"redis": cluster_store}, "redis", [200_000_000])
    ((locator, _),) = list(cluster_store.list_locators())
    owner = redis_cluster.master_of_key(locator.split("}")[0] + "}")
    (replica,) = redis_cluster.replicas_of(owner)
    redis_cluster.wait_until(lambda: _replica_caught_up(owner, replica), what="the replica to have the payload")
    with replica.client() as c:
        c.execute_command("READONLY")
        keys = sorted(
            k
            for k in c.scan_iter(match=f"{cluster_store.prefix}:*", count=1000)
            if not k.endswith((b":pending", b":written"))
        )
        assert len(keys) == 3 and sum(int(c.strlen(k)) for k in keys) == 200_000_000, "replicated whole"


def _replica_caught_up(master: ClusterNode, replica: ClusterNode) -> bool:
    return int(master.info("replication")["master_repl_offset"]) == int(
        replica.info("replication").get("slave_repl_offset", -1)
    )


def test_rollback_on_a_failed_send_leaves_nothing_on_any_node(
    kafka: KafkaService, topic: str, redis_cluster: RedisClusterServer, cluster_store: RedisStore
) -> None:
    producer = HybridProducer({**kafka.producer_config(), "message.timeout.ms": 5000}, stores={"redis": cluster_store})
    errors: list[Any] = []
    for i in range(6):
        try:
            producer.produce(
                topic,
                payload(3_000_000, i),
                partition=9,
                route="reference:redis",
                on_delivery=lambda err, msg: errors.append(err),
            )
        except Exception as exc:  # librdkafka may refuse the partition synchronously once metadata is known
            errors.append(exc)
    producer.flush(30)
    assert len(errors) == 6 and all(e is not None for e in errors)
    # the brokers know the topic: refused in produce before the store write (issue 38.7), nothing to roll back
    assert all(isinstance(e, KafkaException) and e.args[0].code() == KafkaError._UNKNOWN_PARTITION for e in errors)
    assert producer.metrics()["rollbacks"] == 0
    for node in redis_cluster.nodes:  # replicas too: the delete replicated like the write did
        with node.client() as c:
            if node.info("replication")["role"] == "slave":
                c.execute_command("READONLY")
            assert list(c.scan_iter(match=f"{cluster_store.prefix}:*", count=1000)) == [], node.address


# -- failover -------------------------------------------------------------------------------------


@pytest.mark.parametrize("client_retry", ["default", "fail-fast"])
def test_master_killed_mid_stream(
    kafka: KafkaService, topic: str, consumer_config: Any, own_redis_cluster: RedisClusterServer, client_retry: str
) -> None:
    """Producing goes on through a master's SIGKILL. With redis-py's default retries a write to the
    dead master's slots blocks (seconds) and then either lands on the promoted replica or fails;
    with a fail-fast client (no retries) such writes fail at once with a typed error and fall back
    to chunking until the replica took over, then go by reference again. Either way every
    acknowledged message reaches the consumer as its own bytes or as a typed error with its record."""
    cluster = own_redis_cluster
    client = cluster.client() if client_retry == "default" else cluster.client(retry=Retry(NoBackoff(), 0))
    store = RedisStore(client, prefix="gwfo")
    producer = HybridProducer(
        {**kafka.producer_config(), "store.probe.interval.ms": 300},
        policy=SizeThresholdPolicy(reference_above=SIZE // 2, store="redis"),
        stores={"redis": store},
    )
    acked: set[int] = set()
    failed: dict[int, Any] = {}
    raised: list[BaseException] = []
    sent = [0]
    stalls: list[float] = []
    stop = threading.Event()

    def report(i: int) -> Any:
        return lambda err, msg: acked.add(i) if err is None else failed.__setitem__(i, err)

    def produce_loop() -> None:
        i = 0
        while not stop.is_set():
            started = time.monotonic()
            try:
                producer.produce(topic, payload(SIZE, i), key=str(i).encode(), on_delivery=report(i))
            except GatewayError as exc:
                raised.append(exc)
            except BaseException as exc:  # anything untyped fails the test below
                raised.append(exc)
                return
            stalls.append(time.monotonic() - started)
            i += 1
            sent[0] = i
            producer.poll(0)
            time.sleep(0.02)

    thread = threading.Thread(target=produce_loop)
    thread.start()
    try:
        _wait(lambda: sent[0] >= 60)
        victim = cluster.master_nodes()[0]
        cluster.kill(victim)
        killed_at = sent[0]
        promoted = cluster.wait_for_failover(victim)
        recovered_at = sent[0]
        _wait(lambda: sent[0] >= recovered_at + 150)
    finally:
        stop.set()
        thread.join(60)
    assert producer.flush(60) == 0
    # A client without retries learns the new topology only from its next failure, so the producer
    # may need another poll or two; a fresh client sees the truth at once.
    # The consumer side uses a client with redis-py's default retries: a consumer cannot fall back.
    reader_client = cluster.client()
    reader = RedisStore(reader_client, prefix=store.prefix)
    _wait(lambda: producer.flush(1) == 0 and reader.list_pending(2**62) == [], timeout=30)
    assert not [e for e in raised if not isinstance(e, GatewayError)], raised
    assert not raised, "not a forced route: the producer chunked instead of raising"
    assert not failed and acked == set(range(sent[0])), "every message was acknowledged"
    counters = producer.metrics()
    if client_retry == "fail-fast":
        assert counters["store.put.failures"] >= 1 and counters["fallbacks"] >= 1, counters
        assert recovered_at - killed_at >= 10, "the stream kept flowing while the slot had no master"

    raw = read_partition(consumer_config(), topic, 0, _record_count(consumer_config(), topic))
    envelopes_after = [m for m in raw if envelope_header() in (m.headers() or []) and int(m.key()) > recovered_at]
    promoted_slots = {
        loc for loc, _ in reader.list_locators() if cluster.master_of_key(loc.split("}")[0] + "}").port == promoted.port
    }
    assert envelopes_after and promoted_slots, "the reference route came back, on the promoted master too"

    consumer = HybridConsumer(consumer_config(), stores={"redis": reader})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, sent[0], timeout=180)
    consumer.close()
    delivered = Counter(int(m.key()) for m in got)
    assert all(m.value() == payload(SIZE, int(m.key())) for m in got), "never wrong bytes"
    lost = [e for e in errors if isinstance(e, PayloadNotFoundError)]
    assert len(lost) == len(errors), f"only lost payloads may surface as errors: {errors}"
    assert all(e.kafka_message is not None for e in lost)
    lost_keys = {int(e.kafka_message.key()) for e in lost}
    assert set(delivered) | lost_keys == acked and not set(delivered) & lost_keys
    assert max(delivered.values()) == 1, "no duplicates"
    print(
        f"\n[redis failover] sent={sent[0]} acked={len(acked)} delivered={len(delivered)} lost={len(lost_keys)}"
        f" duplicated=0 killed_after={killed_at} failover_done_after={recovered_at}"
        f" put_failures={counters['store.put.failures']} fallbacks={counters['fallbacks']}"
        f" longest_produce_call={max(stalls):.2f}s ({client_retry})"
    )
    client.close()
    reader_client.close()


def test_payload_lost_to_asynchronous_replication_is_a_typed_error(
    kafka: KafkaService, topic: str, consumer_config: Any, own_redis_cluster: RedisClusterServer
) -> None:
    """Deterministic loss: every replica is frozen (SIGSTOP) and cut off (CLIENT KILL TYPE replica on
    every master), so a write acknowledged now exists on its master only; that master is then
    SIGKILLed and the replicas thawed. The frozen replica cannot reconnect before its master is
    gone, so it is promoted without the payload. The consumer must get PayloadNotFoundError with
    the record, and the messages before and after must resolve."""
    cluster = own_redis_cluster
    client = cluster.client()
    store = RedisStore(client, prefix="gwloss")
    producer = HybridProducer(kafka.producer_config(), stores={"redis": store})
    producer.produce(topic, payload(400_000, 1), key=b"before", route="reference:redis")
    assert producer.flush(30) == 0
    ((before_locator, _),) = list(store.list_locators())
    cluster.wait_until(
        lambda: all(_replica_caught_up(m, r) for m in cluster.master_nodes() for r in cluster.replicas_of(m)),
        what="replicas in sync",
    )
    replicas = [r for m in cluster.master_nodes() for r in cluster.replicas_of(m)]
    for replica in replicas:
        replica.proc.popen.send_signal(signal.SIGSTOP)
    try:
        for master in cluster.master_nodes():
            with master.client() as c:
                c.execute_command("CLIENT", "KILL", "TYPE", "replica")
        producer.produce(topic, payload(400_000, 2), key=b"lost", route="reference:redis")
        assert producer.flush(30) == 0
        lost_locator = next(loc for loc, _ in store.list_locators() if loc != before_locator)
        victim = cluster.master_of_key(lost_locator.split("}")[0] + "}")
        cluster.kill(victim)
    finally:
        for replica in replicas:
            replica.proc.popen.send_signal(signal.SIGCONT)
    cluster.wait_for_failover(victim)
    with pytest.raises(PayloadNotFoundError):  # the precondition: the promoted replica never had it
        store.get(lost_locator)
    producer.produce(topic, payload(400_000, 3), key=b"after", route="reference:redis")
    assert producer.flush(30) == 0
    consumer = HybridConsumer(consumer_config(**{"enable.auto.commit": False}), stores={"redis": store})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, errors = consume_all(consumer, 3)
    consumer.close()
    assert [(m.key(), hashlib.sha256(m.value()).digest()) for m in got] == [
        (b"before", hashlib.sha256(payload(400_000, 1)).digest()),
        (b"after", hashlib.sha256(payload(400_000, 3)).digest()),
    ]
    (error,) = errors
    assert isinstance(error, PayloadNotFoundError) and error.kafka_message.key() == b"lost"
    assert lost_locator in str(error)
    client.close()


def test_forced_reference_route_fails_typed_while_the_slot_has_no_master(
    kafka: KafkaService, topic: str, own_redis_cluster: RedisClusterServer
) -> None:
    """Between the SIGKILL and the promotion a write to the dead master's slots raises
    StoreUnavailableError (a forced route does not fall back) and leaves nothing behind."""
    cluster = own_redis_cluster
    client = cluster.client(retry=Retry(NoBackoff(), 0))
    store = RedisStore(client, prefix="gwdown")
    victim = cluster.master_nodes()[0]
    cluster.kill(victim)
    producer = HybridProducer(kafka.producer_config(), stores={"redis": store})
    refused: list[StoreUnavailableError] = []
    for _ in range(200):  # message ids are the producer's own: try until one lands on the dead master
        try:
            producer.produce(topic, payload(200_000), route="reference:redis")
        except StoreUnavailableError as exc:
            refused.append(exc)
            break
    assert refused and "forced" in str(refused[0])
    assert producer.flush(30) == 0
    cluster.wait_for_failover(victim)
    with cluster.client() as fresh:
        assert RedisStore(fresh, prefix=store.prefix).list_pending(2**62) == [], "the failed write left no mark"
    client.close()


def _wait(cond: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _record_count(conf: dict[str, Any], topic: str) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer(conf)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert low == 0, "the broker's retention removed records; the test's messages must stay smaller"
    return int(high - low)


def test_client_from_url_recognises_a_cluster(redis_cluster: RedisClusterServer, redis_server: Any) -> None:
    """One ``--redis-url`` for tools: any node of a cluster gives a cluster client (and the slotted layout)."""
    from redis.cluster import RedisCluster

    from stores import redis_client_from_url

    node = redis_cluster.master_nodes()[0]
    with redis_client_from_url(f"redis://{node.address}") as client:
        assert isinstance(client, RedisCluster) and RedisStore(client).layout == "slotted"
    with redis_client_from_url(redis_server.url) as client:
        assert not isinstance(client, RedisCluster) and RedisStore(client).layout == "flat"
    with pytest.raises(StoreUnavailableError):
        redis_client_from_url(f"redis://127.0.0.1:{free_port()}", socket_connect_timeout=1)
