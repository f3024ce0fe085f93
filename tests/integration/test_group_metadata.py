"""A consumer group shared with Java clients: commit metadata exact in both directions.

Java side: tests/peerwriters' ``GroupCommitter``, Apache ``kafka-clients``' own ``commitSync`` and
``committed`` (Maven Central), one JVM per module driven line by line. It commits what LinkedIn's
``LiKafkaConsumer`` commits (``"<high watermark>,<user metadata>"``, UTF-8, no terminator) and
what other Java clients commit (nothing, Kafka Streams' base64, 4 KB of any characters), and
reads back, byte for byte, what ``HybridConsumer`` commits.

The other tests write metadata as any client could (bytes in no encoding, 100 KB on the mock)
through the library's own exact writer, and read what the library commits with its exact reader,
whose exactness the Java tests establish.
"""

from __future__ import annotations

import base64
import json
import os
import random
import select
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from gateway import HybridConsumer, HybridProducer
from gateway.librdkafka.group_offsets import StoredOffset, group_offsets
from gateway.protocol.metadata import offset_from_metadata, user_metadata_from
from gateway.protocol.splitter import iter_split
from gateway.testing import KafkaService

PEERS_DIR = Path(__file__).resolve().parents[1] / "peerwriters"
JAVA_MAIN = "gateway.peers.GroupCommitter"
STREAMS = base64.b64encode(struct.pack(">bqi", 2, 1_700_000_000_000, 0)).decode()  # Kafka Streams' v2 form


class JavaGroups:
    """One JVM running ``GroupCommitter``: one JSON command per line in, one answer per line out."""

    def __init__(self, bootstrap: str, log: Path) -> None:
        classes = PEERS_DIR / "target" / "classes"
        if not (classes / "gateway" / "peers" / "GroupCommitter.class").is_file():
            pytest.fail("tests/peerwriters is not built: run `make peer-writers` (make test does)")
        classpath = f"{classes}{os.pathsep}{PEERS_DIR / 'target' / 'lib' / '*'}"
        self._log = log
        self._stderr = log.open("w")
        self._proc = subprocess.Popen(
            ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath, JAVA_MAIN, bootstrap],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
        )

    def _ask(self, command: dict[str, Any]) -> list[dict[str, Any]]:
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()
        ready, _, _ = select.select([stdout], [], [], 120)
        line = stdout.readline() if ready else ""
        if not line:
            pytest.fail(f"GroupCommitter did not answer: {self._log.read_text()[-3000:]}")
        return list(json.loads(line)["partitions"])

    def commit(self, group: str, topic: str, offsets: dict[int, tuple[int, str]]) -> dict[int, bytes]:
        """Commit ``partition: (offset, metadata)``; the metadata bytes Java sent, per partition."""
        entries = [{"topic": topic, "partition": p, "offset": o, "metadata": m} for p, (o, m) in offsets.items()]
        return {
            e["partition"]: bytes.fromhex(e["metadata_hex"]) for e in self._ask({"group": group, "commit": entries})
        }

    def read(self, group: str, topic: str, partitions: list[int]) -> dict[int, tuple[int, bytes] | None]:
        """What Java's ``committed`` returns: offset and metadata bytes, or ``None`` when nothing is committed."""
        answer = self._ask({"group": group, "read": [{"topic": topic, "partition": p} for p in partitions]})
        return {
            e["partition"]: None if e["offset"] is None else (e["offset"], bytes.fromhex(e["metadata_hex"]))
            for e in answer
        }

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)
        self._stderr.close()


@pytest.fixture(scope="module")
def java(kafka: KafkaService, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaGroups]:
    groups = JavaGroups(kafka.bootstrap_servers, tmp_path_factory.mktemp("java") / "group-committer.log")
    yield groups
    groups.close()


def _stored(kafka: KafkaService, group: str, topic: str, partitions: list[int]) -> dict[int, StoredOffset]:
    """The group's commits read by the library's exact reader, from a consumer outside the group."""
    consumer = Consumer(kafka.client_conf(**{"group.id": group}))
    try:
        return {s.partition: s for s in group_offsets(consumer).committed([(topic, p) for p in partitions], 30)}
    finally:
        consumer.close()


def _commit_foreign(kafka: KafkaService, group: str, topic: str, offsets: dict[int, tuple[int, bytes]]) -> None:
    """Commit raw metadata bytes as another client could, from outside the group."""
    consumer = Consumer(kafka.client_conf(**{"group.id": group}))
    try:
        group_offsets(consumer).commit([StoredOffset(topic, p, o, m) for p, (o, m) in offsets.items()], False)
    finally:
        consumer.close()


def _produce(kafka: KafkaService, records: list[tuple[str, int, bytes, list[tuple[str, bytes]] | None]]) -> None:
    producer = Producer(kafka.producer_config())
    for topic, partition, value, headers in records:
        producer.produce(topic, value, partition=partition, headers=headers)
        producer.flush(30)  # one by one: offsets as listed


def _read(consumer: HybridConsumer, want: int, timeout: float = 60) -> dict[int, list[tuple[int, bytes]]]:
    """``want`` messages by partition, then a short wait that must bring nothing more (no duplicates)."""
    got: dict[int, list[tuple[int, bytes]]] = {}
    count, deadline = 0, time.monotonic() + timeout
    while count < want and time.monotonic() < deadline:
        for msg in consumer.consume(100, 0.5):
            assert msg.error() is None, msg.error()
            got.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))
            count += 1
    extra = consumer.consume(100, 1.0)
    assert count == want and not extra, (count, want, [(m.partition(), m.offset()) for m in extra])
    return got


def _any_characters(size: int, seed: int) -> str:
    """Characters from every UTF-8 length (NUL and commas too), ``size`` bytes as UTF-8; no surrogates."""
    rng = random.Random(seed)
    ranges = [(0x00, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFF), (0x10000, 0x10FFFF)]
    out, used = ["~"], 1  # not a digit: this is no high watermark
    while True:
        low, high = rng.choice(ranges)
        ch = chr(rng.randint(low, high))
        if used + len(ch.encode()) > size:
            return "".join(out) + "x" * (size - used)
        out.append(ch)
        used += len(ch.encode())


LINKEDIN, USER, EMPTY, KSTREAMS, ANY = range(5)


@pytest.mark.requires("java_clients")
def test_hybrid_consumer_resumes_a_group_java_clients_committed(kafka: KafkaService, java: JavaGroups) -> None:
    """Java commits LinkedIn's and other clients' metadata; reading resumes exactly where each says.

    Partition 0 is where LinkedIn's consumer stood: a chunked message begun at 0 is incomplete, the
    plain records at 1 and 3 were delivered, so it committed the safe offset 0 with ``"4,"``.
    Resuming must deliver the message (completed at 4) and what follows, not 1 and 3 again.
    """
    topic, group = f"t-{uuid.uuid4().hex[:10]}", f"g-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic, partitions=5)
    message = bytes(range(256)) * 40
    segs = list(iter_split(topic, 0, None, uuid.uuid4(), None, message, 4000))
    assert len(segs) == 3
    layout = [segs[0], b"p0", segs[1], b"p1", segs[2], b"p2", b"p3"]
    records: list[tuple[str, int, bytes, list[tuple[str, bytes]] | None]] = []
    for item in layout:
        if isinstance(item, bytes):
            records.append((topic, 0, item, None))
        else:
            records.append((topic, 0, bytes(item.value or b""), [(k, bytes(v)) for k, v in item.headers or ()]))
    records += [(topic, p, b"%d-%d" % (p, i), None) for p in range(1, 5) for i in range(15)]
    _produce(kafka, records)
    metadata = {LINKEDIN: "4,", USER: "11,user-meta", EMPTY: "", KSTREAMS: STREAMS, ANY: _any_characters(4096, 30)}
    committed_at = {LINKEDIN: 0, USER: 9, EMPTY: 7, KSTREAMS: 5, ANY: 3}
    sent = java.commit(group, topic, {p: (committed_at[p], metadata[p]) for p in metadata})
    assert len(sent[ANY]) == 4096 and sent[LINKEDIN] == b"4,"

    # the library's reader gets exactly the bytes Java sent: no over-read, no terminator
    stored = _stored(kafka, group, topic, list(metadata))
    assert {p: (s.offset, s.metadata or b"") for p, s in stored.items()} == {
        p: (committed_at[p], sent[p]) for p in metadata
    }

    conf = kafka.consumer_config(group, **{"enable.auto.commit": False})
    with HybridConsumer(conf) as consumer:
        partitions = [TopicPartition(topic, p) for p in metadata]
        view = {tp.partition: (tp.offset, tp.metadata) for tp in consumer.committed(partitions, timeout=30)}
        assert view == {
            LINKEDIN: (4, ""),
            USER: (11, "user-meta"),
            EMPTY: (7, ""),
            KSTREAMS: (5, STREAMS),
            ANY: (3, metadata[ANY].split("\x00", 1)[0]),  # a TopicPartition's metadata is a C string
        }
        raw = {tp.partition: tp.offset for tp in consumer.committed_safe_offsets(partitions, timeout=30)}
        assert raw == committed_at
        consumer.subscribe([topic])
        got = _read(consumer, 3 + (15 - 11) + (15 - 7) + (15 - 5) + (15 - 3))
        assert consumer.metrics()["commits.metadata.foreign"] == 3
    assert got[LINKEDIN] == [(4, message), (5, b"p2"), (6, b"p3")]  # 0 lost, 0 delivered twice
    assert [o for o, _ in got[USER]] == list(range(11, 15))
    for p in (EMPTY, KSTREAMS, ANY):  # not LinkedIn's form: no high watermark, from the committed offset
        assert [o for o, _ in got[p]] == list(range(committed_at[p], 15)), p


ENCODINGS = {"nul-terminated": b"\x00", "java": b""}
"""``commit.metadata.encoding``: what each puts after the UTF-8 of ``"<high watermark>,<user metadata>"``."""


@pytest.mark.requires("java_clients")
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_java_reads_back_exactly_what_hybrid_consumer_commits(
    kafka: KafkaService, java: JavaGroups, encoding: str
) -> None:
    """``"<high watermark>,<user metadata>"`` as UTF-8, from every commit path: with one NUL at its end by
    default, none with ``java``. LinkedIn's parser takes the same high watermark from both."""
    end = ENCODINGS[encoding]
    topic, group = f"t-{uuid.uuid4().hex[:10]}", f"g-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic, partitions=3)
    first, _rest = list(iter_split(topic, 0, None, uuid.uuid4(), None, bytes(9000), 4000))[:2]
    records: list[tuple[str, int, bytes, list[tuple[str, bytes]] | None]] = [
        (topic, 0, b"a%d" % i, None) for i in range(3)
    ]
    records.append((topic, 0, bytes(first.value or b""), [(k, bytes(v)) for k, v in first.headers or ()]))
    records.append((topic, 0, b"after", None))  # offset 4; the message begun at 3 never completes
    records += [(topic, p, b"%d" % i, None) for p in (1, 2) for i in range(5)]
    _produce(kafka, records)
    reported: list[tuple[Any, list[TopicPartition]]] = []
    conf = kafka.consumer_config(
        group,
        **{
            "enable.auto.commit": False,
            "on_commit": lambda err, parts: reported.append((err, parts)),
            "commit.metadata.encoding": encoding,
        },
    )
    with HybridConsumer(conf) as consumer:
        consumer.subscribe([topic])
        _read(consumer, 4 + 5 + 5)
        done = consumer.commit(asynchronous=False)  # delivered so far, LinkedIn's form
        assert done is not None and sorted((tp.partition, tp.offset, tp.metadata) for tp in done) == [
            (0, 5, ""),
            (1, 5, ""),
            (2, 5, ""),
        ]
        consumer.commit(offsets=[TopicPartition(topic, 1, 5, metadata="user-meta")], asynchronous=False)
        consumer.commit(offsets=[TopicPartition(topic, 2, 4, metadata="é,ü")], asynchronous=True)
        deadline = time.monotonic() + 30
        while not reported and time.monotonic() < deadline:
            consumer.poll(0.2)
    assert [(err, [(tp.partition, tp.offset, tp.metadata) for tp in parts]) for err, parts in reported] == [
        (None, [(2, 4, "é,ü")])
    ]
    back = java.read(group, topic, [0, 1, 2])
    assert back == {0: (3, b"5," + end), 1: (5, b"5,user-meta" + end), 2: (4, "4,é,ü".encode() + end)}
    # as LinkedIn's LiKafkaClientsUtils reads them: the high watermark it resumes from, and the user metadata
    linkedin = {p: (offset_from_metadata(m.decode()), user_metadata_from(m.decode())) for p, (_, m) in back.items()}
    tail = end.decode()
    assert linkedin == {0: (5, tail), 1: (5, "user-meta" + tail), 2: (4, "é,ü" + tail)}


@pytest.mark.requires("commit_metadata")
def test_no_metadata_a_broker_holds_makes_poll_or_committed_raise(kafka: KafkaService) -> None:
    """Bytes in no encoding, a NUL inside, empty, a comma with no number, and the largest the broker takes."""
    topic, group = f"t-{uuid.uuid4().hex[:10]}", f"g-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic, partitions=6)
    _produce(kafka, [(topic, p, b"%d" % i, None) for p in range(6) for i in range(6)])
    largest = 100_000 if kafka.name == "mock" else 4096  # Apache Kafka's offset.metadata.max.bytes
    foreign = {
        0: (1, b"\xff\xfe\xc3(not utf-8"),
        1: (2, b"abc\x00def"),
        2: (3, b""),
        3: (4, b"x,y"),
        4: (5, random.Random(4).randbytes(largest)),
        5: (2, b"3,ok"),  # LinkedIn's form: resume at 2, deliver from 3
    }
    _commit_foreign(kafka, group, topic, foreign)
    stored = _stored(kafka, group, topic, list(foreign))
    if kafka.name == "mock":  # the mock keeps any bytes; Apache Kafka decodes them as UTF-8 on the way in
        assert {p: s.metadata or b"" for p, s in stored.items()} == {p: m for p, (_, m) in foreign.items()}
    with HybridConsumer(kafka.consumer_config(group, **{"enable.auto.commit": False})) as consumer:
        view = consumer.committed([TopicPartition(topic, p) for p in foreign], timeout=30)
        assert [tp.offset for tp in view] == [1, 2, 3, 4, 5, 3]
        assert view[1].metadata == "abc" and view[5].metadata == "ok"
        consumer.subscribe([topic])
        got = _read(consumer, sum(6 - o for o, _ in foreign.values()) - 1)
        assert consumer.metrics()["commits.metadata.foreign"] == 5
    assert {p: [o for o, _ in got[p]] for p in got} == {
        p: list(range(offset + (1 if p == 5 else 0), 6)) for p, (offset, _) in foreign.items()
    }


@pytest.mark.requires("commit_metadata")
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_every_commit_path_writes_the_configured_encoding(kafka: KafkaService, topic: str, encoding: str) -> None:
    """Synchronous, asynchronous, stored-offset and close-time commits: the UTF-8 of ``"<hw>,<user>"``, then
    one NUL by default and nothing more with ``commit.metadata.encoding=java``."""
    end = ENCODINGS[encoding]
    _produce(kafka, [(topic, 0, b"%d" % i, None) for i in range(6)])
    group = f"g-{uuid.uuid4().hex[:10]}"
    conf = kafka.consumer_config(
        group,
        **{
            "enable.auto.offset.store": False,
            "auto.commit.interval.ms": 600_000,
            "commit.metadata.encoding": encoding,
        },
    )
    seen: list[bytes | None] = []
    with HybridConsumer(conf) as consumer:
        consumer.subscribe([topic])
        assert len(_read(consumer, 6)[0]) == 6
        consumer.commit(offsets=[TopicPartition(topic, 0, 2, metadata="sync")], asynchronous=False)
        seen.append(_stored(kafka, group, topic, [0])[0].metadata)
        consumer.commit(offsets=[TopicPartition(topic, 0, 3, metadata="async")], asynchronous=True)
        deadline = time.monotonic() + 30
        while _stored(kafka, group, topic, [0])[0].offset != 3 and time.monotonic() < deadline:
            consumer.poll(0.1)
        seen.append(_stored(kafka, group, topic, [0])[0].metadata)
        consumer.store_offsets(offsets=[TopicPartition(topic, 0, 5, metadata="stored")])
        consumer.commit(asynchronous=False)
        seen.append(_stored(kafka, group, topic, [0])[0].metadata)
    seen.append(_stored(kafka, group, topic, [0])[0].metadata)  # the commit on close: what was delivered
    assert seen == [m + end for m in (b"2,sync", b"3,async", b"5,stored", b"6,")]


@pytest.mark.requires("transactions")
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_offsets_sent_to_a_transaction_carry_the_configured_encoding(
    kafka: KafkaService, topic: str, encoding: str
) -> None:
    """The producer takes ``commit.metadata.encoding`` too: a group it commits is read like the consumer's."""
    _produce(kafka, [(topic, 0, b"%d" % i, None) for i in range(4)])
    group = f"g-{uuid.uuid4().hex[:10]}"
    conf = kafka.consumer_config(group, **{"enable.auto.commit": False, "isolation.level": "read_committed"})
    producer = HybridProducer(
        kafka.producer_config(
            **{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}", "commit.metadata.encoding": encoding}
        )
    )
    with HybridConsumer(conf) as consumer, producer:
        consumer.subscribe([topic])
        _read(consumer, 4)
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.send_offsets_to_transaction(consumer.safe_offsets(), consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
    stored = _stored(kafka, group, topic, [0])[0]
    assert (stored.offset, stored.metadata) == (4, b"4," + ENCODINGS[encoding])
    if encoding == "nul-terminated":
        reads = _confluent_reads(kafka, group, topic, [0], 5)
        assert (reads["consumer_errors"], reads["admin_errors"], reads["seen"]) == ([], [], {((0, 4, "4,"),)})


def test_a_commit_the_broker_refuses_raises_a_kafka_error(kafka: KafkaService, topic: str) -> None:
    """Through librdkafka's own call, a failed commit still raises confluent-kafka's KafkaException."""
    consumer = Consumer(kafka.client_conf(**{"group.id": f"g-{uuid.uuid4().hex[:10]}"}))
    try:
        with pytest.raises(KafkaException):
            group_offsets(consumer).commit([StoredOffset(f"no-such-{uuid.uuid4().hex[:8]}", 7, 1, b"1,")], False)
    finally:
        consumer.close()


def _confluent_reads(kafka: KafkaService, group: str, topic: str, partitions: list[int], tries: int) -> dict[str, Any]:
    """``tries`` reads each through confluent-kafka's own ``Consumer.committed()`` and
    ``AdminClient.list_consumer_group_offsets``: how many raised, and every (offset, metadata) seen."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    out: dict[str, Any] = {"consumer_errors": [], "admin_errors": [], "seen": set()}
    wanted = [TopicPartition(topic, p) for p in partitions]
    consumer = Consumer(kafka.client_conf(**{"group.id": group}))
    admin = AdminClient(kafka.client_conf())
    try:
        for _ in range(tries):
            try:
                got = consumer.committed(wanted, timeout=30)
                out["seen"].add(tuple((tp.partition, tp.offset, tp.metadata) for tp in got))
            except UnicodeDecodeError as exc:
                out["consumer_errors"].append(repr(exc))
            future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, wanted)])[group]
            try:
                result = future.result(30)
                listed = sorted(result.topic_partitions, key=lambda tp: tp.partition)
                out["seen"].add(tuple((tp.partition, tp.offset, tp.metadata) for tp in listed))
            except UnicodeDecodeError as exc:
                out["admin_errors"].append(repr(exc))
    finally:
        consumer.close()
    return out


@pytest.mark.requires("commit_metadata")
def test_confluent_kafka_reads_what_hybrid_consumer_commits(kafka: KafkaService, topic: str) -> None:
    """Lag monitors and ops scripts read a group with confluent-kafka's own calls: none of 50 reads each raises.

    librdkafka's ``rd_kafka_committed`` (and the admin result) hand confluent-kafka a copy of the
    stored metadata sized exactly, with no terminator (librdkafka #4649's fix in 2.6.1 terminated
    only the response parser's copy), and confluent-kafka copies it as a C string: metadata
    without a NUL of its own was read past its end (Java's ``"5,"``: ``UnicodeDecodeError`` in 50
    of 50 ``committed()`` calls and 41 of 50 ``list_consumer_group_offsets``, the rest returned
    garbage such as ``"5,(Wu\x7f"``). The default commit ends in a NUL, after the comma, where
    LinkedIn's parser never looks for the high watermark.
    """
    _produce(kafka, [(topic, 0, b"%d" % i, None) for i in range(5)])
    group = f"g-{uuid.uuid4().hex[:10]}"
    with HybridConsumer(kafka.consumer_config(group, **{"enable.auto.commit": False})) as consumer:
        consumer.subscribe([topic])
        assert len(_read(consumer, 5)[0]) == 5
        consumer.commit(asynchronous=False)
        assert _stored(kafka, group, topic, [0])[0].metadata == b"5,\x00"
        reads = _confluent_reads(kafka, group, topic, [0], 50)
        assert (reads["consumer_errors"], reads["admin_errors"]) == ([], [])
        assert reads["seen"] == {((0, 5, "5,"),)}

        consumer.commit(offsets=[TopicPartition(topic, 0, 5, metadata="user-meta")], asynchronous=False)
        reads = _confluent_reads(kafka, group, topic, [0], 10)
        assert (reads["consumer_errors"], reads["admin_errors"]) == ([], [])
        assert reads["seen"] == {((0, 5, "5,user-meta"),)}

    # and the group resumes exactly for the library itself
    _produce(kafka, [(topic, 0, b"5", None)])
    with HybridConsumer(kafka.consumer_config(group, **{"enable.auto.commit": False})) as consumer:
        shown = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert [(tp.offset, tp.metadata) for tp in shown] == [(5, "user-meta")]
        consumer.subscribe([topic])
        assert _read(consumer, 1) == {0: [(5, b"5")]}
