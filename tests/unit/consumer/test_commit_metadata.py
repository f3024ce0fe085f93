"""Commit metadata read as bytes: only LinkedIn's form sets a high watermark, nothing a broker holds raises.

The integration side (Java commits on Apache Kafka, exact bytes both ways) is in
tests/integration/test_group_metadata.py.
"""

from __future__ import annotations

import base64
import logging
import struct
from collections.abc import Sequence
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from gateway import HybridConsumer
from gateway.consumer._commits import FOREIGN, GroupCommits
from gateway.consumer._errors import RateLimitedLog
from gateway.core.pipeline import ConsumerPipeline
from gateway.librdkafka.binding import RD_KAFKA_CONSUMER, RD_KAFKA_PRODUCER, Librdkafka, client_handle
from gateway.librdkafka.group_offsets import (
    BindingGroupOffsets,
    ExactGroupOffsets,
    GroupOffsets,
    StoredOffset,
    group_offsets,
    pop_commit_encoding,
)
from gateway.protocol.metadata import (
    CommitEncoding,
    commit_metadata,
    encode_metadata,
    offset_from_metadata,
    read_metadata,
    user_metadata_from,
    wrap_metadata,
)
from gateway.protocol.primitives import INT64_MAX, INT64_MIN
from tests.unit.fake_clock import ManualClock

STREAMS = base64.b64encode(struct.pack(">bqi", 2, 1_700_000_000_000, 0)).decode()  # Kafka Streams' v2 form
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)))  # what a TopicPartition can carry


@given(st.binary(max_size=6000))
def test_any_bytes_read_without_raising_and_only_linkedins_form_sets_a_high_watermark(raw: bytes) -> None:
    got = read_metadata(raw)
    head, comma, _ = raw.partition(b",")
    linkedin = bool(comma) and offset_from_metadata(head.decode("utf-8", "replace") + ",") is not None
    assert (got.high_watermark is not None) == linkedin
    assert got.size == len(raw)
    assert got.user is not None and "\x00" not in got.user


@given(st.integers(INT64_MIN, INT64_MAX), texts)
def test_what_we_commit_reads_back_as_written(high_watermark: int, user: str) -> None:
    raw = encode_metadata(wrap_metadata(high_watermark, user))
    assert raw == f"{high_watermark},{user}".encode()  # UTF-8, no terminator: what Java's getBytes gives
    got = read_metadata(raw)
    assert (got.high_watermark, got.user) == (high_watermark, user.split("\x00", 1)[0])


@given(st.integers(INT64_MIN, INT64_MAX), texts, st.sampled_from(CommitEncoding))
def test_every_encoding_we_commit_reads_back_and_gives_linkedin_the_same_high_watermark(
    high_watermark: int, user: str, encoding: CommitEncoding
) -> None:
    user = user.split("\x00", 1)[0]  # a TopicPartition's metadata is a C string
    raw = commit_metadata(wrap_metadata(high_watermark, user), encoding)
    ends = {CommitEncoding.NUL_TERMINATED: b"\x00", CommitEncoding.JAVA: b""}[encoding]
    assert raw == f"{high_watermark},{user}".encode() + ends
    assert raw.split(b"\x00", 1)[0] == f"{high_watermark},{user}".encode()  # what a C-string reader stops at
    got = read_metadata(raw)
    assert (got.high_watermark, got.user) == (high_watermark, user)
    text = raw.decode()  # as a Java client decodes it, then LinkedIn's LiKafkaClientsUtils
    assert (offset_from_metadata(text), user_metadata_from(text)) == (high_watermark, user + ends.decode())


def test_the_commit_encoding_is_nul_terminated_unless_configured() -> None:
    conf: dict[str, Any] = {"commit.metadata.encoding": "JAVA", "other": 1}
    assert pop_commit_encoding(conf) is CommitEncoding.JAVA and conf == {"other": 1}
    assert pop_commit_encoding({}) is CommitEncoding.NUL_TERMINATED
    with pytest.raises(ValueError, match=r"commit\.metadata\.encoding must be one of nul-terminated, java"):
        pop_commit_encoding({"commit.metadata.encoding": "utf-8"})


@pytest.mark.parametrize(
    ("raw", "high_watermark", "user"),
    [
        (b"4,", 4, ""),  # LinkedIn's consumer with no user metadata, and this library's ``java`` encoding
        (b"11,user-meta", 11, "user-meta"),
        (b"9,\x00", 9, ""),  # this library's default encoding (and commits through confluent-kafka)
        (b"5,m\x00", 5, "m"),
        (b"", None, ""),  # a plain Java or librdkafka commit
        (STREAMS.encode(), None, STREAMS),
        (b"\xff\xfe,4", None, "\ufffd\ufffd,4"),  # no encoding at all (brokers other than Apache Kafka keep it)
        (b"0" * 5000 + b"7,x", 7, "x"),  # Long.parseLong takes leading zeros; int() would refuse 5000 digits
        (b"9" * 5000 + b",x", None, "9" * 5000 + ",x"),  # past int64
        (b"-3,x", -3, "x"),
        (b" 3,x", None, " 3,x"),
        ("٤٢,".encode(), 42, ""),  # Java's parseLong takes any Unicode digit
        (b"a\x00b", None, "a"),
    ],
)
def test_stored_metadata(raw: bytes, high_watermark: int | None, user: str) -> None:
    got = read_metadata(raw)
    assert (got.high_watermark, got.user) == (high_watermark, user)
    assert got.foreign == (high_watermark is None)


class StoredGroup(GroupOffsets):
    """Stands in for the group's stored commits."""

    def __init__(self, stored: dict[tuple[str, int], tuple[int, bytes | None]]) -> None:
        self.stored = stored

    def committed(self, keys: Sequence[tuple[str, int]], timeout: float) -> list[StoredOffset]:
        return [StoredOffset(t, p, *self.stored.get((t, p), (-1001, None))) for t, p in keys]


def test_foreign_metadata_is_counted_warned_about_at_a_limited_rate_and_sets_no_high_watermark(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stored: dict[tuple[str, int], tuple[int, bytes | None]] = {
        ("t", 0): (3, b"4,"),
        ("t", 1): (5, b""),
        ("t", 2): (7, STREAMS.encode()),
        ("t", 3): (9, bytes(range(256)) * 16),
        ("t", 4): (11, None),  # a null metadata STRING on a commit
        ("t", 5): (-1001, None),  # nothing committed
    }
    pipeline = ConsumerPipeline()
    clock = ManualClock()
    warnings = RateLimitedLog(logging.getLogger("t"), 60, lambda: clock.monotonic)
    commits = GroupCommits(StoredGroup(stored), pipeline, None, warnings)
    with caplog.at_level(logging.WARNING):
        commits.load(list(stored))
        clock.advance(61)
        commits.load([("t", 2)])
    assert commits.counters[FOREIGN] == 5
    assert len(caplog.records) == 2  # one line per minute, the rest counted
    assert "and 3 more like it" in caplog.records[1].getMessage()
    assert pipeline._high_watermarks[("t", 0)].initial == 4
    assert [pipeline._high_watermarks[("t", p)].initial for p in (1, 2, 3, 4, 5)] == [-1] * 5
    view = GroupCommits.user_view(StoredGroup(stored).committed(list(stored), 1))
    assert [(tp.offset, tp.metadata) for tp in view] == [
        (4, ""),
        (5, ""),
        (7, STREAMS),
        (9, ""),  # bytes(range(256)) starts with a NUL: a C string ends there
        (11, ""),
        (-1001, None),
    ]


class BindingPartition:
    """A confluent-kafka TopicPartition whose metadata its C extension over-read into bytes that do not decode."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset, self.error = topic, partition, offset, None

    @property
    def metadata(self) -> str:
        raise UnicodeDecodeError("utf-8", b"4,\xf5\x95\x8aU", 2, 3, "invalid start byte")


class BindingConsumer:
    def __init__(self) -> None:
        self.commits: list[list[TopicPartition]] = []

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[Any]:
        return [BindingPartition(tp.topic, tp.partition, 3) for tp in partitions]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
        self.commits.append(offsets)
        return offsets


def test_the_fallback_through_confluent_kafka_never_raises_on_metadata_it_cannot_decode() -> None:
    pipeline = ConsumerPipeline()
    consumer = BindingConsumer()
    commits = GroupCommits(BindingGroupOffsets(consumer), pipeline, None)
    commits.load([("t", 0)])
    assert pipeline._high_watermarks[("t", 0)].initial == -1
    assert commits.counters[FOREIGN] == 1
    assert [(tp.offset, tp.metadata) for tp in commits.user_view(commits.read([TopicPartition("t", 0)]))] == [(3, "")]
    done = commits.commit({("t", 0): (2, "4,m"), ("t", 1): (5, "6,")}, asynchronous=False)
    assert [(tp.offset, tp.metadata) for tp in done or []] == [(4, "m"), (6, "")]
    assert [(tp.offset, tp.metadata) for tp in consumer.commits[0]] == [(2, "4,m"), (5, "6,")]


def test_the_exact_owner_is_what_a_consumer_uses_and_a_closed_consumer_raises_as_confluent_kafka_does() -> None:
    """If a confluent-kafka upgrade moved the handle, this fails in CI instead of silently falling back."""
    conf = {"group.id": "g", "bootstrap.servers": "127.0.0.1:1", "log_level": 0}
    consumer = HybridConsumer(conf)
    assert isinstance(consumer._offsets.commits.group, ExactGroupOffsets)
    consumer.close()
    with pytest.raises(RuntimeError, match="Consumer closed"):
        consumer.committed([TopicPartition("t", 0)], timeout=1)
    lib = Librdkafka.get()
    assert lib is not None
    plain = Consumer(conf)
    assert client_handle(lib, plain, RD_KAFKA_CONSUMER) is not None
    assert client_handle(lib, plain, RD_KAFKA_PRODUCER) is None
    assert client_handle(lib, object(), RD_KAFKA_CONSUMER) is None
    assert isinstance(group_offsets(BindingConsumer()), BindingGroupOffsets)
    plain.close()
