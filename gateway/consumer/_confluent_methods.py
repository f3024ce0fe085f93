"""The rest of ``confluent_kafka.Consumer``'s methods on :class:`~gateway.HybridConsumer`.

Each keeps confluent-kafka's name, arguments and return value. Those librdkafka answers untouched
are in :class:`LibrdkafkaAnswers`. Those that touch offsets go through the offset driver, as
``assign``, ``seek`` and ``commit`` do: an explicitly assigned offset is a seek, a stored offset is
committed as a safe offset with LinkedIn's metadata, and partitions that leave take their queued
records and state with them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition

from gateway.auditing import Auditor
from gateway.consumer._events import EventHandler
from gateway.consumer._inbox import FlowControl, Inbox
from gateway.consumer._offsets import OffsetDriver, RebalanceCallback
from gateway.consumer._record_processor import BatchFetcher, MessageCollector
from gateway.consumer.handoff import Handoff
from gateway.consumer.resolver import Resolver
from gateway.core.pipeline import ConsumerPipeline
from gateway.tracing import ConsumerTelemetry

log = logging.getLogger(__name__)


class LibrdkafkaAnswers:
    """confluent-kafka's methods whose answer is librdkafka's own: nothing the gateway keeps (segments,
    safe offsets, kept messages) changes it, so each only asks the :class:`~gateway.consumer._inbox.Inbox`.

    Kept apart from :class:`ConfluentMethods`, which holds the methods that go through the gateway's
    state, so that a method here is seen at once to need no translation (and one there to need one).
    """

    _inbox: Inbox

    @property
    def inner(self) -> Consumer:
        """The wrapped librdkafka consumer; reading from it directly bypasses reassembly and tracking."""
        return self._inbox.client  # type: ignore[no-any-return]

    def offsets_for_times(self, partitions: Sequence[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        """The first offset at or after each timestamp, as Kafka answers it.

        All segments of a chunked message carry the message's timestamp, so the answer is the first
        segment of the first message at or after the time; ``seek`` to it delivers that message whole.
        """
        if timeout is None or timeout < 0:
            return self._inbox.offsets_for_times(list(partitions))
        return self._inbox.offsets_for_times(list(partitions), timeout=timeout)

    def consumer_group_metadata(self) -> Any:
        """The group's metadata, for ``HybridProducer.send_offsets_to_transaction`` in consume-transform-produce."""
        return self._inbox.consumer_group_metadata()

    def cluster_id(self, timeout: float = -1) -> str | None:
        """The cluster's id, as confluent-kafka's: to tell which cluster a consumer reads."""
        return self._inbox.cluster_id(timeout)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Rotate the SASL user and password without a new consumer (and without losing buffered segments)."""
        self._inbox.set_sasl_credentials(username, password)

    def assignment(self) -> list[TopicPartition]:
        """The partitions this consumer holds now, as confluent-kafka's."""
        return self._inbox.assignment()

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int] | None:
        """Low and high watermarks of ``partition``: raw Kafka offsets, not the safe offsets of large messages."""
        if timeout is None:
            return self._inbox.get_watermark_offsets(partition, cached=cached)
        return self._inbox.get_watermark_offsets(partition, timeout=timeout, cached=cached)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """Cluster metadata, as confluent-kafka's, for checking topics and partitions before consuming."""
        return self._inbox.list_topics(topic, timeout)

    def memberid(self) -> Any:
        """This member's id in its group, as confluent-kafka's: for logs that match the broker's."""
        return self._inbox.memberid()


class ConfluentMethods(LibrdkafkaAnswers):
    """Mixed into :class:`~gateway.HybridConsumer`, which provides its clients, driver and pipeline."""

    _offsets: OffsetDriver
    _pipeline: ConsumerPipeline
    _inbox: Inbox
    _resolver: Resolver
    _events: EventHandler
    _flow: FlowControl
    _handoff: Handoff
    _auditor: Auditor | None
    _auto_commit: bool
    _collector: MessageCollector
    _fetcher: BatchFetcher
    _spans: ConsumerTelemetry
    _closed = True
    """Until ``__init__`` has run, and after ``close()``: calls raise ``RuntimeError("Consumer closed")``."""

    def _check_open(self) -> None:
        """For the calls that reach no librdkafka handle first (which would raise the same): as confluent-kafka's."""
        if self._closed:
            raise RuntimeError("Consumer closed")

    def close(self) -> None:
        """Commit what was delivered (auto-commit), then free everything; idempotent.

        A callback that raises while the consumer closes (``error_cb`` served by the final commit or
        by librdkafka's close) is logged, not raised: the consumer ends closed either way, and a
        ``with`` block or ``finally: close()`` does not replace the application's own exception.
        """
        if self._closed:
            return
        self._spans.release()  # the application held its last messages until now
        if self._auto_commit:
            try:
                self._offsets.commit_quietly(asynchronous=False)
            except Exception as exc:  # noqa: BLE001 - raised by an application callback inside the commit
                log.warning("a callback raised while the consumer committed on close: %r", exc)
        self._closed = True
        self._fetcher.plain_runs_on = False  # what is still queued is dropped, so poll() raises as confluent-kafka's
        self._inbox.clear()
        self._handoff.clear()
        self._resolver.close()
        self._events.close()
        if self._auditor is not None:
            self._auditor.close()
        self._offsets.commits.close()
        try:
            self._inbox.close()
        except Exception as exc:  # noqa: BLE001 - only callbacks raise here; librdkafka's handle is gone already
            log.warning("a callback raised while the consumer closed: %r", exc)

    def metrics(self) -> dict[str, int]:
        """Counters of the reassembly, the resolver and the commits, for dashboards and ``gateway.prometheus``."""
        return {
            **self._pipeline.metrics(),
            **self._events.counters,
            **self._resolver.metrics(),
            **self._offsets.commits.counters,
        }

    @property
    def handoff(self) -> Handoff:
        """For a driver carrying ``poll``/``consume`` results to another thread (:mod:`gateway.consumer.handoff`)."""
        return self._handoff

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def incremental_assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Add partitions to the assignment; an explicit offset is a seek, as in ``assign``."""
        self._check_open()
        self._offsets.add(partitions)
        self._inbox.assign(list(partitions), incremental=True)

    def incremental_unassign(self, partitions: Sequence[TopicPartition]) -> None:
        """Remove partitions; their queued records, pending segments and stored offsets go with them."""
        self._check_open()
        self._inbox.unassign(list(partitions))
        self._offsets.forget([(tp.topic, tp.partition) for tp in partitions])

    def store_offsets(self, message: Message | None = None, offsets: Sequence[TopicPartition] | None = None) -> None:
        """Keep user offsets for the next commit without arguments (``enable.auto.offset.store=false``).

        They are committed as safe offsets, like ``commit(message=...)`` / ``commit(offsets=...)``:
        an incomplete large message before them is never skipped.
        """
        self._check_open()
        self._offsets.store(message, offsets)

    def safe_offsets(self) -> list[TopicPartition]:
        """Commit-ready offsets of what was delivered, for ``send_offsets_to_transaction``.

        Safe offsets with LinkedIn's metadata, exactly what ``commit()`` would commit: a group that
        resumes from them re-reads an incomplete large message from its first segment.
        """
        self._check_open()
        return self._offsets.delivered_safe_offsets()

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop fetching ``partitions``; the segments buffered for them stay until ``resume``."""
        self._flow.user_pause(partitions)

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        """Resumes what the application paused; a partition paused for room goes on when there is room."""
        self._flow.user_resume(partitions)

    # -- commits, positions, seeks (see gateway.consumer._offsets) ------------------------------
    def commit(
        self,
        message: Message | None = None,
        offsets: Sequence[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        """Commit safe offsets with LinkedIn's ``"<HW>,<metadata>"`` metadata.

        With no argument: what was delivered so far. With ``message`` or ``offsets``: those user
        offsets, translated to the offset a restart must resume from. Synchronous commits return
        the user-visible offsets, as ``committed()`` would show them.
        """
        self._check_open()
        return self._offsets.commit(message, offsets, asynchronous)

    def _on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        self._offsets.commits.on_commit(err, partitions)

    def committed(self, partitions: Sequence[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        """The user-visible committed offsets: the high watermark LinkedIn keeps in the metadata.

        Metadata in LinkedIn's form shows its user part; any other metadata (another client's) is
        shown whole with the raw offset, as a C string: ``TopicPartition`` cannot hold a NUL.
        """
        self._check_open()
        commits = self._offsets.commits
        return commits.user_view(commits.read(partitions, timeout))

    def committed_safe_offsets(self, partitions: Sequence[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        """What the broker really stores: the offset a restart resumes from, and the whole metadata."""
        self._check_open()
        return self._offsets.commits.stored_view(partitions, timeout)

    def safe_offset(self, partition: TopicPartition) -> int | None:
        """The offset a restart must resume from so that nothing delivered later is lost."""
        self._check_open()
        return self._pipeline.commits.safe_offset((partition.topic, partition.partition))

    def position(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        """Where consumption stands, in offsets a user can compare with delivered messages' offsets."""
        self._check_open()
        return self._offsets.position(partitions)

    def seek(self, partition: TopicPartition) -> None:
        """LinkedIn's seek: land on the first segment of the message at ``partition.offset``.

        Seeking back into a delivered large message re-delivers it whole; messages below the
        target are re-read but not re-delivered; below the tracked range raises
        :class:`~gateway.errors.OffsetNotTrackedError`.
        """
        self._check_open()
        self._offsets.seek(partition)

    # -- membership ----------------------------------------------------------------------------
    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """Join the group for ``topics``; the callbacks also see the offsets the large messages in flight need.

        On revoke, safe offsets are committed first when auto-commit is on, so that a message
        half-read when its partition moved is read again whole by the next owner.
        """
        if not isinstance(topics, list):  # as confluent-kafka: a str would subscribe to each character
            raise TypeError(f"expected a list of topic names, got {type(topics).__name__}")
        assigned, revoked, lost = self._offsets.rebalance_callbacks(
            self, on_assign, on_revoke, on_lost, commit_on_revoke=self._auto_commit
        )
        self._inbox.subscribe(list(topics), on_assign=assigned, on_revoke=revoked, on_lost=lost)

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Read ``partitions`` without a group; the offset tracking of large messages starts over for them."""
        self._check_open()
        self._offsets.assign(partitions)
        self._inbox.assign(list(partitions))

    def unassign(self) -> None:
        """Drop every assignment, and with it the segments buffered and the offsets tracked for them."""
        self._check_open()
        self._inbox.unassign()
        self._offsets.reset()

    def unsubscribe(self) -> None:
        """Leave the group's subscription, committing safe offsets first when auto-commit is on."""
        self._check_open()
        if self._auto_commit:
            self._offsets.commit_quietly(asynchronous=False)
        self._inbox.unsubscribe()
        self._offsets.reset()
