"""The consumer's side of its group's committed offsets: what they mean to the pipeline and to the user.

:mod:`gateway.librdkafka.group_offsets` moves the bytes; this turns them into the pipeline's high watermarks
(only LinkedIn's ``"<HW>,<meta>"`` sets one), into what ``committed()`` and ``on_commit`` show, and
back into commits. Metadata in any other form (Kafka Streams' base64, Flink's, empty, bytes in no
encoding, thousands of bytes) reads as "no high watermark": the partition resumes at the committed
offset, a counter goes up and a rate-limited warning says so. Nothing a broker can hold raises.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from gateway.consumer._errors import RateLimitedLog
from gateway.core.commits import CommitTranslator
from gateway.core.pipeline import ConsumerPipeline
from gateway.librdkafka.group_offsets import GroupOffsets, StoredOffset, binding_offsets, c_string, topic_partition
from gateway.protocol.metadata import CommitEncoding, commit_metadata, read_metadata
from gateway.protocol.records import TopicPartitionKey

log = logging.getLogger(__name__)

FOREIGN = "commits.metadata.foreign"
"""Counter and warning kind: stored metadata that is not LinkedIn's form."""


class GroupCommits:
    """Reads and commits through one :class:`~gateway.librdkafka.group_offsets.GroupOffsets`; one per consumer."""

    def __init__(
        self,
        group: GroupOffsets,
        pipeline: ConsumerPipeline,
        on_commit: Callable[..., Any] | None,
        warnings: RateLimitedLog | None = None,
        encoding: CommitEncoding = CommitEncoding.NUL_TERMINATED,
    ) -> None:
        self.group = group
        self._encoding = encoding
        self._pipeline = pipeline
        self._user_on_commit = on_commit
        self._warnings = warnings or RateLimitedLog(log)
        self.counters = {FOREIGN: 0}
        self._nothing: list[KafkaError] = []  # asynchronous commits that had nothing to commit, to report

    # -- reading -------------------------------------------------------------------------------
    def load(self, keys: Iterable[TopicPartitionKey]) -> None:
        """Hand the stored commits of ``keys`` to the pipeline (one broker call for all)."""
        for stored in self.group.committed(list(keys), 30):
            self.load_one(stored)

    def load_one(self, stored: StoredOffset) -> None:
        """Hand one stored commit to the pipeline: its offset, and a high watermark only from LinkedIn's form."""
        if stored.offset < 0:
            self._pipeline.commits.load_commit(stored.key, None, None)
            return
        raw = stored.metadata or b""  # what Kafka stores for a commit without metadata
        metadata = read_metadata(raw)
        if metadata.foreign:
            self.counters[FOREIGN] += 1
            self._warnings.warning(
                FOREIGN,
                'committed metadata of %s[%d] is not LinkedIn\'s "<high watermark>,<metadata>" (%d bytes: %r): '
                "reading resumes at the committed offset %d, with no high watermark",
                stored.topic,
                stored.partition,
                metadata.size,
                raw[:32],
                stored.offset,
            )
        self._pipeline.commits.load_commit(stored.key, stored.offset, metadata.high_watermark)

    def read_one(self, key: TopicPartitionKey) -> StoredOffset:
        return self.group.committed([key], 30)[0]

    def read(self, partitions: Sequence[TopicPartition], timeout: float = -1) -> list[StoredOffset]:
        """The stored commits of ``partitions``; a partition's error raises (typed) instead of hiding in a field."""
        stored = self.group.committed([(tp.topic, tp.partition) for tp in partitions], timeout)
        for entry in stored:
            if entry.error:
                where = f"{entry.topic}[{entry.partition}]"
                raise KafkaException(KafkaError(entry.error, f"committed offset of {where} could not be read"))
        return stored

    def stored_view(self, partitions: Sequence[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        """What the broker stores: offsets and metadata (as a C string, which is all ``TopicPartition`` holds)."""
        return [
            topic_partition(e.topic, e.partition, e.offset, c_string(e.metadata))
            for e in self.read(partitions, timeout)
        ]

    @staticmethod
    def high_watermark_view(stored: StoredOffset) -> int | None:
        """The user-visible committed offset: LinkedIn's high watermark, else the raw offset (``None``: none)."""
        if stored.offset < 0:
            return None
        return CommitTranslator.user_view_of_commit(stored.offset, read_metadata(stored.metadata or b""))[0]

    @staticmethod
    def user_view(stored: Iterable[StoredOffset]) -> list[TopicPartition]:
        """What ``committed()`` shows: the high watermark and user metadata of LinkedIn's form, else the raw commit."""
        out = []
        for entry in stored:
            if entry.offset < 0:
                out.append(TopicPartition(entry.topic, entry.partition, entry.offset))
                continue
            offset, metadata = CommitTranslator.user_view_of_commit(entry.offset, read_metadata(entry.metadata or b""))
            out.append(topic_partition(entry.topic, entry.partition, offset, metadata))
        return out

    # -- committing ----------------------------------------------------------------------------
    def commit(
        self, translated: dict[TopicPartitionKey, tuple[int, str]], asynchronous: bool
    ) -> list[TopicPartition] | None:
        """Commit broker offsets with their ``"<HW>,<meta>"`` metadata, sent as ``commit.metadata.encoding`` says."""
        to_commit = [
            StoredOffset(t, p, off, commit_metadata(meta, self._encoding)) for (t, p), (off, meta) in translated.items()
        ]
        result = self.group.commit(to_commit, asynchronous)
        return None if result is None else self.user_view(result)

    def on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        """confluent-kafka's on_commit: only commits made through its binding (``BindingGroupOffsets``) end here."""
        if self._user_on_commit is not None:
            self._user_on_commit(err, self.user_view(binding_offsets(partitions)))

    def nothing_committed(self) -> None:
        """An asynchronous commit found nothing to commit: ``on_commit`` hears ``_NO_OFFSET`` with no
        partitions at the next poll, as librdkafka reports it to confluent-kafka's."""
        if self._user_on_commit is not None:
            self._nothing.append(KafkaError(KafkaError._NO_OFFSET, "Local: No offset stored"))

    def serve_results(self) -> None:
        """Asynchronous commits that finished: to the application's ``on_commit``, or a failure logged."""
        while self._nothing and self._user_on_commit is not None:
            self._user_on_commit(self._nothing.pop(0), [])
        for result in self.group.results():
            if self._user_on_commit is not None:
                self._user_on_commit(result.error, self.user_view(result.offsets))
            elif result.error is not None:
                log.warning("commit failed: %s", result.error)

    def close(self) -> None:
        """Before the consumer closes: finished asynchronous commits reported, the owner's resources freed."""
        self.serve_results()
        self.group.close()
