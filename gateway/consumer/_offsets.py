"""Commits, committed offsets, positions and seeks of :class:`~gateway.consumer._hybrid_consumer.HybridConsumer`.

The pipeline does the translation (user offsets to safe offsets with LinkedIn's ``"<HW>,<meta>"``
metadata and back, seek plans); this module makes the librdkafka calls around it. Committed offsets
are read and written through :class:`~gateway.consumer._commits.GroupCommits`, metadata as exact bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, Message, TopicPartition

from gateway.consumer._commits import GroupCommits
from gateway.consumer._inbox import FlowControl, Inbox, partition_of
from gateway.core.commits import SeekPlan
from gateway.core.pipeline import ConsumerPipeline
from gateway.errors import GatewayError, OffsetNotTrackedError
from gateway.protocol.records import TopicPartitionKey

log = logging.getLogger(__name__)

RebalanceCallback = Callable[[Any, list[TopicPartition]], None]


def _without_metadata(positions: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey, tuple[int, str | None]]:
    return {tp: (off, "") for tp, off in positions.items()}


class OffsetDriver:
    """The librdkafka side of offsets and partition state; one per consumer."""

    def __init__(
        self,
        pipeline: ConsumerPipeline,
        queue: Inbox,
        commits: GroupCommits,
        flow: FlowControl,
        *,
        auto_offset_store: bool = True,
    ) -> None:
        self._flow = flow
        self._pipeline = pipeline
        self._inbox = queue
        self.commits = commits
        self.auto_offset_store = auto_offset_store
        self.stored: dict[TopicPartitionKey, tuple[int, str]] = {}
        """``store_offsets``' user offsets, committed by the next commit without arguments."""

    def load_commits(self, batch: Iterable[Any]) -> None:
        """Read the stored high watermark of partitions seen for the first time (one broker call for all)."""
        commits = self._pipeline.commits
        missing = {partition_of(m) for m in batch if m.error() is None and commits.needs_commit(partition_of(m))}
        if not missing:
            return
        try:
            self.commits.load(missing)
        except KafkaException as exc:
            raise KafkaException(exc.args[0]) from exc

    def positions(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """Where each partition really is: the first raw record not yet processed, else librdkafka's position."""
        wanted = list(tps)
        out = self._inbox.next_offsets(wanted)
        rest = [TopicPartition(t, p) for t, p in wanted if (t, p) not in out]
        if rest:
            for tp in self._inbox.fetch_positions(rest):
                out[(tp.topic, tp.partition)] = tp.offset
        return {tp: out[tp] for tp in wanted if tp in out}

    def position(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        positions = self.positions(keys)
        return [TopicPartition(t, p, positions.get((t, p), OFFSET_INVALID)) for t, p in keys]

    def commit(
        self, message: Message | None, offsets: Sequence[TopicPartition] | None, asynchronous: bool, quiet: bool = False
    ) -> list[TopicPartition] | None:
        """As confluent-kafka's: with nothing to commit, an asynchronous commit returns None (``on_commit``
        hears ``_NO_OFFSET`` at the next poll unless ``quiet``) and a synchronous one raises ``_NO_OFFSET``."""
        if message is not None and offsets is not None:
            raise ValueError("message and offsets are mutually exclusive")
        if message is not None:
            key, at = partition_of(message), message.offset()
            wanted: dict[TopicPartitionKey, tuple[int, str | None]] = {}  # no offset: nothing, as confluent-kafka's
            if at is not None:
                wanted[key] = (at + 1, "")
                self._pipeline.commits.release(key, at)  # that record only: never one before it
            ignore_hw = True
        elif offsets is not None:
            # no metadata is "" as Kafka clients since 2.1 write it (LinkedIn's codec would say "null")
            wanted = {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in offsets}
            ignore_hw = True
        elif not self.auto_offset_store:  # librdkafka's rule: only what the application stored
            wanted = dict(self.stored)  # kept: committing the same offsets again is harmless
            ignore_hw = True
        else:
            wanted = _without_metadata(self._delivered_positions())
            ignore_hw = False
        translated = self._pipeline.commits.safe_offsets_to_commit(wanted, ignore_hw)
        if translated:
            return self.commits.commit(translated, asynchronous)
        if not asynchronous:
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET, "Commit failed: Local: No offset stored"))
        if not quiet:
            self.commits.nothing_committed()
        return None

    def _delivered_positions(self) -> dict[TopicPartitionKey, int]:
        assigned = [(tp.topic, tp.partition) for tp in self._inbox.assignment()]
        return self._pipeline.commits.current_positions(self.positions(assigned))

    def delivered_safe_offsets(self) -> list[TopicPartition]:
        """What a commit without arguments commits: per assigned partition, the safe offset of what
        was delivered, with LinkedIn's ``"<HW>,<metadata>"`` metadata (``safe_offsets()``)."""
        positions = self._delivered_positions()
        translated = self._pipeline.commits.safe_offsets_to_commit(_without_metadata(positions), False)
        return [TopicPartition(t, p, off, metadata=meta) for (t, p), (off, meta) in translated.items()]

    def store(self, message: Message | None, offsets: Sequence[TopicPartition] | None) -> None:
        """``store_offsets``: user offsets kept for the next commit without arguments."""
        if self.auto_offset_store:
            raise KafkaException(
                KafkaError(KafkaError._INVALID_ARG, "store_offsets needs enable.auto.offset.store=false")
            )
        if message is not None and offsets is not None:
            raise ValueError("message and offsets are mutually exclusive")  # confluent-kafka's words, both
        if message is None and offsets is None:
            raise ValueError("expected either message or offsets")
        if message is not None:
            key, at = partition_of(message), message.offset()
            if at is not None:  # a message without an offset stores nothing
                self._pipeline.commits.release(key, at)
                self.stored[key] = (at + 1, "")
            return
        assert offsets is not None
        for tp in offsets:
            self.stored[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")

    def commit_quietly(self, asynchronous: bool, partitions: Iterable[TopicPartitionKey] | None = None) -> None:
        """Auto-commit, revoke and close: a failed commit is logged, never raised into the loop."""
        try:
            if partitions is None:
                self.commit(None, None, asynchronous, quiet=True)
                return
            positions = self._pipeline.commits.current_positions(self.positions(list(partitions)))
            if not positions:
                return
            translated = self._pipeline.commits.safe_offsets_to_commit(_without_metadata(positions), False)
            self.commits.commit(translated, asynchronous)
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "code", lambda: None)() == KafkaError._NO_OFFSET:
                return
            log.warning("commit failed: %s", exc)
        except GatewayError as exc:  # e.g. an offset no longer tracked: nothing safe to commit
            log.warning("commit skipped: %s", exc)

    def seek(self, partition: TopicPartition) -> None:
        """LinkedIn's seek: land on the first segment of the message at ``partition.offset``.

        librdkafka is asked first, so a partition it cannot seek fails at once ("Erroneous state",
        as confluent-kafka's seek) rather than after the committed offset could not be read.
        """
        key = (partition.topic, partition.partition)
        offset = partition.offset
        if offset < 0:  # OFFSET_BEGINNING / OFFSET_END / OFFSET_STORED
            self._inbox.seek(partition)
            self._inbox.drop(key)
            self._pipeline.forget(key)
            self._flow.settle([key])
            self._pipeline.commits.set_high_watermark(key, 0)
            return
        delivered = self._pipeline.delivered(key)
        if delivered is not None and offset == delivered + 1:
            return
        translator = self._pipeline.commits
        try:
            plan: SeekPlan | None = translator.plan_seek(key, offset, None)
        except OffsetNotTrackedError:
            plan = None  # only a seek to the committed position may go below the tracked range: read it first
        if plan is not None:
            self._inbox.seek(TopicPartition(key[0], key[1], plan.target))
        stored = self.commits.read_one(key)
        view = GroupCommits.high_watermark_view(stored)
        final = translator.plan_seek(key, offset, view) if plan is None or view == offset else plan
        target, high_watermark = final.target, final.high_watermark
        if final.to_committed:
            target = stored.offset
            high_watermark = view if view is not None else stored.offset
        if plan is None or target != plan.target:
            self._inbox.seek(TopicPartition(key[0], key[1], target))
        self._inbox.drop(key)
        self._pipeline.forget(key)
        self._flow.settle([key])
        self.commits.load_one(stored)
        translator.set_high_watermark(key, high_watermark)

    # -- partitions come and go ------------------------------------------------------------------
    def forget(self, keys: Sequence[TopicPartitionKey]) -> None:
        """Partitions leave: their queued records and state go; every HW is re-read from Kafka."""
        for key in keys:
            self._inbox.drop(key)
            self.stored.pop(key, None)
        self._pipeline.revoke(list(keys))
        self._flow.settle(keys)  # a partition paused for room does not stay paused in our books

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Before an explicit assignment: forget partitions not in it, and treat explicit offsets as seeks."""
        keep = {(tp.topic, tp.partition) for tp in partitions}
        stale = {tp for tp in self._pipeline.partitions() if tp not in keep}
        stale |= {key for key in self._inbox.partitions() if key not in keep}
        for key in stale:
            self._inbox.drop(key)
            self._pipeline.forget(key)
        self._flow.settle(stale)
        self.add(partitions)

    def add(self, partitions: Sequence[TopicPartition]) -> None:
        """Partitions joining (``assign``, ``incremental_assign``): an explicit offset is a seek."""
        for tp in partitions:  # forget what was known, deliver from there
            if tp.offset >= 0 or tp.offset in (-1, -2):
                key = (tp.topic, tp.partition)
                self._inbox.drop(key)
                self._pipeline.forget(key)
                self._flow.settle([key])
                self._pipeline.commits.set_high_watermark(key, max(tp.offset, 0))

    def reset(self) -> None:
        """Unassign / unsubscribe: nothing queued, no partition state (holds stay until committed)."""
        self._inbox.clear()
        self._pipeline.reset()
        self._flow.reset()

    def rebalance_callbacks(
        self,
        owner: Any,
        on_assign: RebalanceCallback | None,
        on_revoke: RebalanceCallback | None,
        on_lost: RebalanceCallback | None,
        *,
        commit_on_revoke: bool,
    ) -> tuple[RebalanceCallback, RebalanceCallback, RebalanceCallback]:
        """librdkafka's callbacks: the user's (called with ``owner``), then commit and forget what left."""

        def assigned(_: Any, partitions: list[TopicPartition]) -> None:
            if on_assign is not None:
                on_assign(owner, partitions)

        def revoked(_: Any, partitions: list[TopicPartition]) -> None:
            keys = [(tp.topic, tp.partition) for tp in partitions]
            try:
                if on_revoke is not None:
                    on_revoke(owner, partitions)
            finally:  # a failing user callback must not leave stale state behind
                if commit_on_revoke and keys:
                    self.commit_quietly(asynchronous=False, partitions=keys)
                self.forget(keys)

        def lost(_: Any, partitions: list[TopicPartition]) -> None:
            callback = on_lost if on_lost is not None else on_revoke
            try:
                if callback is not None:
                    callback(owner, partitions)
            finally:
                self.forget([(tp.topic, tp.partition) for tp in partitions])

        return assigned, revoked, lost
