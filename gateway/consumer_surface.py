"""The rest of ``confluent_kafka.Consumer``'s methods on :class:`~gateway.HybridConsumer`.

Each keeps confluent-kafka's name, arguments and return value. Those that touch offsets go through
the offset driver, as ``assign``, ``seek`` and ``commit`` do: an explicitly assigned offset is a
seek, a stored offset is committed as a safe offset with LinkedIn's metadata, and partitions that
leave take their queued records and state with them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Message, TopicPartition

from gateway.consumer_offsets import OffsetDriver


class ConsumerSurface:
    """Mixed into :class:`~gateway.HybridConsumer`, which provides ``_consumer`` and ``_offsets``."""

    _consumer: Any
    _offsets: OffsetDriver

    close: Callable[[], None]
    _note_handed: Callable[[], None]  # before reading delivered offsets (see HybridConsumer.poll)
    _end_batch: Callable[[], None]  # before changing a partition's state

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def incremental_assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Add partitions to the assignment; an explicit offset is a seek, as in ``assign``."""
        self._end_batch()
        self._offsets.add(partitions)
        self._consumer.incremental_assign(list(partitions))

    def incremental_unassign(self, partitions: Sequence[TopicPartition]) -> None:
        """Remove partitions; their queued records, pending segments and stored offsets go with them."""
        self._end_batch()
        self._consumer.incremental_unassign(list(partitions))
        self._offsets.forget([(tp.topic, tp.partition) for tp in partitions])

    def store_offsets(self, message: Message | None = None, offsets: Sequence[TopicPartition] | None = None) -> None:
        """Keep user offsets for the next commit without arguments (``enable.auto.offset.store=false``).

        They are committed as safe offsets, like ``commit(message=...)`` / ``commit(offsets=...)``:
        an incomplete large message before them is never skipped.
        """
        self._note_handed()
        self._offsets.store(message, offsets)

    def offsets_for_times(self, partitions: Sequence[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        """The first offset at or after each timestamp, as Kafka answers it.

        All segments of a chunked message carry the message's timestamp, so the answer is the first
        segment of the first message at or after the time; ``seek`` to it delivers that message whole.
        """
        if timeout is None or timeout < 0:
            return list(self._consumer.offsets_for_times(list(partitions)))
        return list(self._consumer.offsets_for_times(list(partitions), timeout=timeout))

    def safe_offsets(self) -> list[TopicPartition]:
        """Commit-ready offsets of what was delivered, for ``send_offsets_to_transaction``.

        Safe offsets with LinkedIn's metadata, exactly what ``commit()`` would commit: a group that
        resumes from them re-reads an incomplete large message from its first segment.
        """
        self._note_handed()
        return self._offsets.delivered_safe_offsets()

    def consumer_group_metadata(self) -> Any:
        return self._consumer.consumer_group_metadata()

    def cluster_id(self, timeout: float = -1) -> str | None:
        return self._consumer.cluster_id(timeout)  # type: ignore[no-any-return]

    def set_sasl_credentials(self, username: str, password: str) -> None:
        self._consumer.set_sasl_credentials(username, password)

    def assignment(self) -> list[TopicPartition]:
        return list(self._consumer.assignment())

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        self._consumer.pause(list(partitions))

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        self._consumer.resume(list(partitions))

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int] | None:
        if timeout is None:
            return self._consumer.get_watermark_offsets(partition, cached=cached)  # type: ignore[no-any-return]
        return self._consumer.get_watermark_offsets(partition, timeout=timeout, cached=cached)  # type: ignore[no-any-return]

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return self._consumer.list_topics(topic=topic, timeout=timeout)

    def memberid(self) -> Any:
        return self._consumer.memberid()
