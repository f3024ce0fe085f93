"""EmbeddedKafka: the in-process mock cluster must behave like a broker to plain confluent-kafka clients.

Every test talks to the cluster over TCP with ordinary clients, so a broken binding (wrong handle,
wrong signature, cluster torn down early) shows up as a failed produce/consume, not as a mocked
success. Consumers use ``assign()`` rather than ``subscribe()`` to avoid the 3 s group join.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from gateway.errors import GatewayError
from gateway.testing.embedded import (
    ALL_BROKERS,
    LIMITS,
    ApiKey,
    EmbeddedKafka,
    EmbeddedKafkaError,
    EmbeddedKafkaProcess,
    _Lib,
)

pytestmark = [pytest.mark.kafka, pytest.mark.embedded, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
QUIET = {"log_level": 0}  # connection-refused noise from tests that break the cluster on purpose


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def _produce(
    bootstrap: str,
    topic: str,
    value: bytes,
    *,
    producer: Producer | None = None,
    flush_timeout: float = 30.0,
    **kwargs: Any,
) -> tuple[KafkaError | None, Message | None]:
    """Produce one record and return what the delivery callback saw."""
    p = producer or Producer({"bootstrap.servers": bootstrap, **QUIET})
    seen: list[tuple[KafkaError | None, Message | None]] = []
    p.produce(topic, value, on_delivery=lambda err, msg: seen.append((err, msg)), **kwargs)
    remaining = p.flush(flush_timeout)
    assert remaining == 0, "delivery callback never ran"
    assert len(seen) == 1
    return seen[0]


def _consume(bootstrap: str, topic: str, partition: int, count: int = 1, **conf: Any) -> list[Message]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            **conf,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[Message] = []
        deadline = time.monotonic() + 15
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
        assert len(out) == count, f"consumed {len(out)} of {count}"
        return out
    finally:
        consumer.close()


def _partitions(bootstrap: str, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    assert md.topics[topic].error is None, md.topics[topic].error
    return len(md.topics[topic].partitions)


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie (exited, not yet reaped by a container's init) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


@pytest.fixture
def cluster() -> Iterator[EmbeddedKafka]:
    with EmbeddedKafka(brokers=3) as c:
        yield c


# ----------------------------------------------------------------------------------------------
# basic behaviour
# ----------------------------------------------------------------------------------------------


def test_round_trip_with_key_and_headers(cluster: EmbeddedKafka) -> None:
    entries = cluster.bootstrap_servers.split(",")
    assert len(entries) == 3
    assert all(e.startswith("127.0.0.1:") and int(e.rsplit(":", 1)[1]) > 0 for e in entries)
    assert cluster.broker_ids == (1, 2, 3)

    topic = _topic()
    cluster.create_topic(topic, partitions=1)
    headers = [("h1", b"one"), ("h1", b"dup"), ("bin", bytes(range(256))), ("empty", b"")]
    err, msg = _produce(cluster.bootstrap_servers, topic, b"value-1", key=b"key-1", headers=headers)
    assert err is None and msg is not None
    assert (msg.partition(), msg.offset()) == (0, 0)

    (got,) = _consume(cluster.bootstrap_servers, topic, 0)
    assert got.key() == b"key-1"
    assert got.value() == b"value-1"
    assert got.offset() == 0
    # Order, duplicates and binary values are kept exactly; an empty value may read back as None.
    raw_headers = got.headers()
    assert isinstance(raw_headers, list)
    assert [(k, v or b"") for k, v in raw_headers] == headers


def test_create_topic_sets_exact_partition_count(cluster: EmbeddedKafka) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=2)
    assert _partitions(cluster.bootstrap_servers, topic) == 2
    err, msg = _produce(cluster.bootstrap_servers, topic, b"x", partition=1)
    assert err is None and msg is not None and msg.partition() == 1

    # Same count again: idempotent. Different count: typed error.
    cluster.create_topic(topic, partitions=2)
    with pytest.raises(EmbeddedKafkaError, match="already exists with 2 partitions") as info:
        cluster.create_topic(topic, partitions=5)
    assert isinstance(info.value, GatewayError)
    assert info.value.code == KafkaError.TOPIC_ALREADY_EXISTS


def test_uncreated_topics_are_auto_created_with_four_partitions(cluster: EmbeddedKafka) -> None:
    topic = _topic()
    assert _partitions(cluster.bootstrap_servers, topic) == 4  # the mock's hard-coded default
    cluster.create_topic(topic, partitions=4)  # agrees with what exists: no error
    with pytest.raises(EmbeddedKafkaError, match="4 partitions"):
        cluster.create_topic(topic, partitions=2)


def test_create_topic_validates_like_kafka(cluster: EmbeddedKafka) -> None:
    for bad in ("", "has space", "a/b", "x" * 250, ".."):
        with pytest.raises(EmbeddedKafkaError, match="invalid topic name"):
            cluster.create_topic(bad, partitions=1)
    with pytest.raises(EmbeddedKafkaError, match="partitions"):
        cluster.create_topic(_topic(), partitions=0)
    with pytest.raises(EmbeddedKafkaError, match="replication_factor"):
        cluster.create_topic(_topic(), partitions=1, replication_factor=4)  # only 3 brokers
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    md = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(topic, timeout=10)
    assert len(md.topics[topic].partitions[0].replicas) == 3


def test_default_partitions_applies_to_create_topic() -> None:
    with EmbeddedKafka(default_partitions=3) as c:
        topic = _topic()
        c.create_topic(topic)
        assert _partitions(c.bootstrap_servers, topic) == 3
    with EmbeddedKafka() as c:
        topic = _topic()
        c.create_topic(topic)
        assert _partitions(c.bootstrap_servers, topic) == 1


def test_delete_topic(cluster: EmbeddedKafka) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=2)
    if not _Lib.get().has("rd_kafka_mock_topic_delete"):
        with pytest.raises(NotImplementedError, match="DeleteTopics"):
            cluster.delete_topic(topic)
        return
    err, _ = _produce(cluster.bootstrap_servers, topic, b"old", partition=0)
    assert err is None
    cluster.delete_topic(topic)
    # Re-creating with another count only succeeds if the topic is really gone.
    cluster.create_topic(topic, partitions=3)
    assert _partitions(cluster.bootstrap_servers, topic) == 3
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert (low, high) == (0, 0), "data survived delete_topic"
    with pytest.raises(EmbeddedKafkaError, match="does not exist"):
        cluster.delete_topic(_topic())


def test_twenty_megabyte_message_round_trips(cluster: EmbeddedKafka) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1)
    payload = os.urandom(1024) * (20 * 1024)  # 20 MiB
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "message.max.bytes": 25_000_000})
    err, _ = _produce(cluster.bootstrap_servers, topic, payload, producer=producer)
    assert err is None, err
    (got,) = _consume(
        cluster.bootstrap_servers,
        topic,
        0,
        **{"fetch.message.max.bytes": 25_000_000, "receive.message.max.bytes": 60_000_000},
    )
    assert got.value() == payload


def test_requests_above_max_request_bytes_are_dropped() -> None:
    """The owner's receive.message.max.bytes is the brokers' ceiling: bigger requests never land."""
    with EmbeddedKafka(max_request_bytes=2_000_000) as c:
        topic = _topic()
        producer = Producer(
            {
                "bootstrap.servers": c.bootstrap_servers,
                "message.max.bytes": 10_000_000,
                "message.timeout.ms": 1500,
                **QUIET,
            }
        )
        err, _ = _produce(c.bootstrap_servers, topic, b"x" * 3_000_000, producer=producer)
        assert err is not None and err.code() == KafkaError._MSG_TIMED_OUT
        err, _ = _produce(c.bootstrap_servers, topic, b"x" * 1000, producer=producer)
        assert err is None


# ----------------------------------------------------------------------------------------------
# fault injection
# ----------------------------------------------------------------------------------------------


def test_broker_down_fails_produce_and_up_recovers() -> None:
    with EmbeddedKafka(brokers=1) as c:
        topic = _topic()
        c.create_topic(topic, partitions=1)
        producer = Producer(
            {
                "bootstrap.servers": c.bootstrap_servers,
                "message.timeout.ms": 1500,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 200,
                **QUIET,
            }
        )
        err, _ = _produce(c.bootstrap_servers, topic, b"before", producer=producer)
        assert err is None

        c.set_broker_down(1)
        err, _ = _produce(c.bootstrap_servers, topic, b"during", producer=producer)
        assert err is not None
        assert err.code() in (KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT)

        c.set_broker_up(1)
        # The same client recovers once it has reconnected and refreshed metadata (about 1 s), so
        # keep producing until one attempt lands rather than racing the 1.5 s message timeout.
        deadline = time.monotonic() + 15
        while True:
            err, msg = _produce(c.bootstrap_servers, topic, b"after", producer=producer)
            if err is None or time.monotonic() > deadline:
                break
        assert err is None and msg is not None, err
        offset = msg.offset()
        assert offset is not None
        got = _consume(c.bootstrap_servers, topic, 0, count=offset + 1)
        assert got[0].value() == b"before"
        assert got[-1].value() == b"after"
        assert b"during" not in [m.value() for m in got]


def test_all_brokers_down(cluster: EmbeddedKafka) -> None:
    cluster.set_broker_down(ALL_BROKERS)
    err, _ = _produce(
        cluster.bootstrap_servers, _topic(), b"x", producer=_fast_failing_producer(cluster.bootstrap_servers)
    )
    assert err is not None and err.code() in (KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT)
    cluster.set_broker_up(ALL_BROKERS)
    err, _ = _produce(cluster.bootstrap_servers, _topic(), b"x")
    assert err is None


def _fast_failing_producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 1500, **QUIET})


def test_pushed_non_retriable_error_reaches_delivery_callback(cluster: EmbeddedKafka) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1)
    cluster.push_request_errors(ApiKey.Produce, [KafkaError.TOPIC_AUTHORIZATION_FAILED])
    err, _ = _produce(cluster.bootstrap_servers, topic, b"x")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED == 29
    # One error was pushed, so it was used up: a new client produces fine. (The first client
    # caches the authorization failure for the topic, as it would against a real broker.)
    err, _ = _produce(cluster.bootstrap_servers, topic, b"y")
    assert err is None


def test_pushed_errors_are_consumed_in_order(cluster: EmbeddedKafka) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "retry.backoff.ms": 10})
    cluster.push_request_errors(
        ApiKey.Produce,
        [KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.MSG_SIZE_TOO_LARGE],
    )
    # Two retriable errors are retried away, the third (non-retriable) one surfaces.
    err, _ = _produce(cluster.bootstrap_servers, topic, b"x", producer=producer)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    err, _ = _produce(cluster.bootstrap_servers, topic, b"y", producer=producer)
    assert err is None


def test_clear_request_errors(cluster: EmbeddedKafka) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1)
    cluster.push_request_errors(ApiKey.Produce, [KafkaError.MSG_SIZE_TOO_LARGE] * 3)
    cluster.clear_request_errors(ApiKey.Produce)
    err, _ = _produce(cluster.bootstrap_servers, topic, b"x")
    assert err is None


def test_fault_injection_validates_arguments(cluster: EmbeddedKafka) -> None:
    with pytest.raises(EmbeddedKafkaError, match="unknown broker id"):
        cluster.set_broker_down(4)
    with pytest.raises(EmbeddedKafkaError, match="unknown broker id"):
        cluster.set_broker_up(0)
    with pytest.raises(ValueError):
        cluster.push_request_errors(-1, [1])
    cluster.push_request_errors(ApiKey.Fetch, [])  # nothing to push is fine
    assert [int(ApiKey.Produce), int(ApiKey.Metadata), int(ApiKey.SyncGroup)] == [0, 3, 14]


def test_group_initial_rebalance_delay_can_be_shortened() -> None:
    with EmbeddedKafka(group_initial_rebalance_delay_ms=0) as c:
        topic = _topic()
        c.create_topic(topic, partitions=1)
        assert _produce(c.bootstrap_servers, topic, b"v")[0] is None
        consumer = Consumer(
            {
                "bootstrap.servers": c.bootstrap_servers,
                "group.id": f"g-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
            }
        )
        try:
            start = time.monotonic()
            consumer.subscribe([topic])
            msg = None
            while msg is None and time.monotonic() - start < 10:
                msg = consumer.poll(0.1)
            elapsed = time.monotonic() - start
        finally:
            consumer.close()
        assert msg is not None and msg.value() == b"v"
        assert elapsed < 2.5, f"join took {elapsed:.1f}s: the 3 s default delay was not lifted"


# ----------------------------------------------------------------------------------------------
# lifecycle
# ----------------------------------------------------------------------------------------------


def test_stop_makes_clients_fail_and_is_idempotent() -> None:
    c = EmbeddedKafka()
    assert not c.is_running
    with pytest.raises(EmbeddedKafkaError, match="not running"):
        _ = c.bootstrap_servers
    c.start()
    c.start()  # idempotent
    bootstrap = c.bootstrap_servers
    topic = _topic()
    c.create_topic(topic, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 1500, **QUIET})
    assert _produce(bootstrap, topic, b"ok", producer=producer)[0] is None

    c.stop()
    c.stop()  # idempotent
    assert not c.is_running
    err, _ = _produce(bootstrap, topic, b"lost", producer=producer)
    assert err is not None and err.code() in (KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT)
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(timeout=1)
    with pytest.raises(EmbeddedKafkaError, match="not running"):
        c.create_topic(topic, partitions=1)


def test_restart_gives_a_fresh_cluster() -> None:
    c = EmbeddedKafka()
    with c:
        first = c.bootstrap_servers
        topic = _topic()
        c.create_topic(topic, partitions=2)
    with c:
        assert c.bootstrap_servers != first
        c.create_topic(topic, partitions=3)  # the old topic is gone with the old cluster
        assert _partitions(c.bootstrap_servers, topic) == 3


def test_two_clusters_are_independent() -> None:
    with EmbeddedKafka() as a, EmbeddedKafka() as b:
        topic = _topic()
        a.create_topic(topic, partitions=2)
        b.create_topic(topic, partitions=3)
        assert _partitions(a.bootstrap_servers, topic) == 2
        assert _partitions(b.bootstrap_servers, topic) == 3


def test_limits_are_documented() -> None:
    for fact in ("4 partitions", "5 MiB", "silently", "offsets_for_times", "isolation", "size limit"):
        assert fact in LIMITS
    assert EmbeddedKafka.__doc__ is not None and "4 partitions" in EmbeddedKafka.__doc__


def test_constructor_validates() -> None:
    with pytest.raises(ValueError):
        EmbeddedKafka(brokers=0)
    with pytest.raises(ValueError):
        EmbeddedKafka(max_request_bytes=10)
    with pytest.raises(ValueError):
        EmbeddedKafka(default_partitions=0)


# ----------------------------------------------------------------------------------------------
# standalone process
# ----------------------------------------------------------------------------------------------


def test_spawned_cluster_serves_this_process_and_exits_on_stop() -> None:
    topic = _topic()
    with EmbeddedKafka.spawn(brokers=2, topics={topic: 2}) as proc:
        assert isinstance(proc, EmbeddedKafkaProcess)
        assert proc.is_running
        assert len(proc.bootstrap_servers.split(",")) == 2
        assert _partitions(proc.bootstrap_servers, topic) == 2
        err, _ = _produce(proc.bootstrap_servers, topic, b"from-parent", key=b"k", partition=1)
        assert err is None
        (got,) = _consume(proc.bootstrap_servers, topic, 1)
        assert (got.key(), got.value()) == (b"k", b"from-parent")
        pid = proc.pid
    assert proc.returncode == 0, proc
    assert _pid_gone(pid)
    assert proc.stop() == 0  # idempotent


def test_spawn_reports_a_dying_child_with_its_stderr() -> None:
    with pytest.raises(EmbeddedKafkaError, match=r"exited with 1: .*invalid topic name"):
        EmbeddedKafka.spawn(topics={"not a valid name": 1}, timeout=30)


def test_cli_prints_bootstrap_writes_file_and_stops_on_sigterm(tmp_path: Path) -> None:
    bootstrap_file = tmp_path / "bootstrap.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.testing.embedded", "--brokers", "2", "--bootstrap-file", str(bootstrap_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()
        assert len(line.split(",")) == 2
        assert bootstrap_file.read_text().strip() == line
        assert _produce(line, _topic(), b"x")[0] is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert not bootstrap_file.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_spawned_cluster_dies_with_its_parent() -> None:
    """A parent that crashes without stop() must not leave an orphaned cluster behind."""
    script = textwrap.dedent(
        """
        import os, sys
        from gateway.testing.embedded import EmbeddedKafka
        proc = EmbeddedKafka.spawn()
        print(proc.pid, flush=True)
        os._exit(0)  # no cleanup: only the stdin lifeline can stop the child
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, env=env, timeout=60, check=True)
    child = int(out.stdout.decode().split()[0])
    deadline = time.monotonic() + 15
    while not _pid_gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not _pid_gone(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail("spawned cluster outlived its parent")
