"""A consumer group's committed offsets, read and written with their metadata byte for byte.

The one owner of both directions. Every read of committed offsets (the commit load on a
partition's first fetch, ``seek``, ``committed()``, ``committed_safe_offsets()``) and every commit
(``commit()``, auto-commit, the commit on revoke and on close) goes through :class:`GroupOffsets`;
``send_offsets_to_transaction`` goes through :func:`send_offsets_to_transaction`.

Why not confluent-kafka's own calls: they over-read metadata without a terminator (Java's) and
append a NUL to every commit (see :mod:`gateway.librdkafka.binding`). :class:`ExactGroupOffsets` calls
librdkafka on the consumer's own handle instead. Where that handle cannot be confirmed,
:class:`BindingGroupOffsets` keeps confluent-kafka's calls, says so once, and never lets
unreadable metadata raise.

What a commit's metadata text becomes on the wire is ``commit.metadata.encoding`` (see
:class:`~gateway.protocol.metadata.CommitEncoding`), read with the other gateway keys by each
client's configuration parser, for the consumer's commits (:func:`pop_commit_encoding`) and for
the producer's transaction offsets alike (``ProducerSettings.commit_encoding``, handed to
:class:`gateway.producer._outbox.ExactProducer`).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, Producer, TopicPartition

from gateway.librdkafka.binding import (
    CLOSED,
    COMMIT_CB,
    EVENT_OFFSET_COMMIT,
    RD_KAFKA_CONSUMER,
    RD_KAFKA_PRODUCER,
    Librdkafka,
    client_handle,
    destroy_list,
    handle_field,
    new_list,
    read_list,
)
from gateway.protocol.metadata import CommitEncoding, commit_metadata, encode_metadata
from gateway.protocol.records import TopicPartitionKey
from gateway.settings.shared import COMMIT_METADATA_ENCODING

log = logging.getLogger(__name__)

_WAIT_SLICE_MS = 200  # a synchronous commit waits in slices, so Ctrl-C gets in between


def pop_commit_encoding(conf: MutableMapping[str, Any]) -> CommitEncoding:
    """``commit.metadata.encoding`` popped from ``conf``: ``nul-terminated`` (the default) or ``java``."""
    return CommitEncoding(COMMIT_METADATA_ENCODING.pop(conf))


@dataclass(frozen=True, slots=True)
class StoredOffset:
    """One partition's committed offset (or one to commit) with its metadata as bytes."""

    topic: str
    partition: int
    offset: int
    """``OFFSET_INVALID`` (-1001) when nothing is committed."""
    metadata: bytes | None
    """Exactly what the broker holds (``None``: nothing, or unreadable through the fallback)."""
    error: int = 0
    """librdkafka's error code for this partition."""

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class CommitResult:
    """How an asynchronous commit ended."""

    error: KafkaError | None
    offsets: list[StoredOffset]


def _timeout_ms(timeout: float) -> int:
    return -1 if timeout is None or timeout < 0 else int(timeout * 1000)


def _ignored(_rk: Any, _err: int, _offsets: Any, _opaque: Any) -> None:
    """Never called (results are read as events), but its presence keeps them off confluent-kafka's on_commit."""


_IGNORED = COMMIT_CB(_ignored)


class GroupOffsets:
    """What the offset driver needs from a consumer group's offsets."""

    exact = False

    def committed(self, keys: Sequence[TopicPartitionKey], timeout: float) -> list[StoredOffset]:
        raise NotImplementedError

    def commit(self, offsets: Sequence[StoredOffset], asynchronous: bool) -> list[StoredOffset] | None:
        """Synchronous: what was committed (raises on failure). Asynchronous: ``None``; see :meth:`results`."""
        raise NotImplementedError

    def results(self) -> list[CommitResult]:
        """Asynchronous commits that finished since the last call."""
        return []

    def close(self) -> None:
        """Before the consumer closes."""


class ExactGroupOffsets(GroupOffsets):
    """librdkafka's ``rd_kafka_committed`` / ``rd_kafka_commit_queue`` on the consumer's own handle."""

    exact = True

    def __init__(self, lib: Librdkafka, consumer: Any, rk: int) -> None:
        self._lib = lib
        self._consumer = consumer
        self._rk = rk
        self._queue: int | None = None  # asynchronous commits report here; made on the first one
        self._pending = 0

    def _handle(self) -> int:
        rk = handle_field(self._consumer)
        if not rk:
            raise RuntimeError(CLOSED[RD_KAFKA_CONSUMER])
        if rk != self._rk:  # never seen: confluent-kafka keeps one handle per client
            checked = client_handle(self._lib, self._consumer, RD_KAFKA_CONSUMER)
            if checked is None:
                raise RuntimeError("the consumer's librdkafka handle changed and cannot be confirmed")
            self._rk = checked
        return rk

    def committed(self, keys: Sequence[TopicPartitionKey], timeout: float) -> list[StoredOffset]:
        lib, rk = self._lib, self._handle()
        plist, _ = new_list(lib, [(t, p, OFFSET_INVALID, None) for t, p in keys])
        try:
            err = lib.committed(rk, plist, _timeout_ms(timeout))
            if err:
                raise KafkaException(KafkaError(err, f"Failed to get committed offsets: {lib.err2text(err)}"))
            entries = read_list(plist)
        finally:
            destroy_list(lib, plist, owned_metadata=False)
        return [StoredOffset(e.topic, e.partition, e.offset, e.metadata, e.err) for e in entries]

    def commit(self, offsets: Sequence[StoredOffset], asynchronous: bool) -> list[StoredOffset] | None:
        lib, rk = self._lib, self._handle()
        plist, _buffers = new_list(lib, [(o.topic, o.partition, o.offset, o.metadata) for o in offsets])
        try:
            if asynchronous:
                if self._queue is None:
                    self._queue = lib.queue_new(rk)
                self._check(lib.commit_queue(rk, plist, self._queue, _IGNORED, None))
                self._pending += 1
                return None
            queue = lib.queue_new(rk)
            try:
                self._check(lib.commit_queue(rk, plist, queue, _IGNORED, None))
                result = self._wait(queue)
            finally:
                lib.queue_destroy(queue)
        finally:  # librdkafka copied the list, metadata included, before commit_queue returned
            destroy_list(lib, plist, owned_metadata=True)
        if result.error is not None:
            raise KafkaException(result.error)
        return result.offsets

    def _check(self, err: int) -> None:
        if err:
            raise KafkaException(KafkaError(err, f"Commit failed: {self._lib.err2text(err)}"))

    def _wait(self, queue: int) -> CommitResult:
        while True:
            event = self._lib.queue_poll(queue, _WAIT_SLICE_MS)
            if event:
                return self._result(event)

    def _result(self, event: int) -> CommitResult:
        lib = self._lib
        try:
            if lib.event_type(event) != EVENT_OFFSET_COMMIT:  # nothing else is sent to these queues
                return CommitResult(KafkaError(KafkaError._FAIL, "unexpected event for a commit"), [])
            err = lib.event_error(event)
            plist = lib.event_topic_partition_list(event)
            entries = read_list(plist) if plist else []
        finally:
            lib.event_destroy(event)
        error = KafkaError(err, f"Commit failed: {lib.err2text(err)}") if err else None
        return CommitResult(error, [StoredOffset(e.topic, e.partition, e.offset, e.metadata, e.err) for e in entries])

    def results(self) -> list[CommitResult]:
        out: list[CommitResult] = []
        while self._pending and self._queue is not None:
            event = self._lib.queue_poll(self._queue, 0)
            if not event:
                break
            self._pending -= 1
            out.append(self._result(event))
        return out

    def close(self) -> None:
        """Drop the asynchronous queue while the handle lives (librdkafka frees queues before handles)."""
        if self._queue is not None and handle_field(self._consumer):
            self._lib.queue_destroy(self._queue)
        self._queue, self._pending = None, 0


class BindingGroupOffsets(GroupOffsets):
    """confluent-kafka's ``committed`` / ``commit``: metadata as exact as its C strings allow (see module doc)."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer

    def committed(self, keys: Sequence[TopicPartitionKey], timeout: float) -> list[StoredOffset]:
        partitions = [TopicPartition(t, p) for t, p in keys]
        if timeout >= 0:
            got = self._consumer.committed(partitions, timeout=timeout)
        else:
            got = self._consumer.committed(partitions)
        return binding_offsets(got)

    def commit(self, offsets: Sequence[StoredOffset], asynchronous: bool) -> list[StoredOffset] | None:
        partitions = [topic_partition(o.topic, o.partition, o.offset, c_string(o.metadata)) for o in offsets]
        result = self._consumer.commit(offsets=partitions, asynchronous=asynchronous)
        if asynchronous:
            return None  # reported through confluent-kafka's on_commit
        return binding_offsets(result or partitions)


def _binding_metadata(tp: TopicPartition) -> bytes | None:
    """What confluent-kafka shows, when it can show it at all (over-read bytes may not decode)."""
    try:
        metadata = tp.metadata
    except UnicodeDecodeError:
        return None
    return None if metadata is None else encode_metadata(metadata)


def c_string(metadata: bytes | None) -> str | None:
    """Metadata as ``TopicPartition.metadata`` can hold it: a C string (up to a NUL), malformed UTF-8 replaced."""
    return None if metadata is None else metadata.split(b"\x00", 1)[0].decode("utf-8", "replace")


def topic_partition(topic: str, partition: int, offset: int, metadata: str | None) -> TopicPartition:
    """confluent-kafka's ``TopicPartition`` refuses ``metadata=None``: it is left out instead."""
    if metadata is None:
        return TopicPartition(topic, partition, offset)
    return TopicPartition(topic, partition, offset, metadata=metadata)


def binding_offsets(partitions: Sequence[TopicPartition]) -> list[StoredOffset]:
    """confluent-kafka's ``TopicPartition`` list (its on_commit) as stored offsets."""
    return [
        StoredOffset(tp.topic, tp.partition, tp.offset, _binding_metadata(tp), _code(tp.error)) for tp in partitions
    ]


def _code(error: Any) -> int:
    return int(error.code()) if error is not None else 0


def group_offsets(consumer: Any) -> GroupOffsets:
    """The exact owner when librdkafka confirms the consumer's handle, else confluent-kafka's calls."""
    lib = Librdkafka.get()
    rk = None if lib is None else client_handle(lib, consumer, RD_KAFKA_CONSUMER)
    if lib is None or rk is None:
        if isinstance(consumer, _cimpl_consumer()):
            log.warning(
                "commit metadata goes through confluent-kafka: commits end in a NUL, and metadata committed "
                "without one (Java clients) may be read as unreadable (no high watermark)"
            )
        return BindingGroupOffsets(consumer)
    return ExactGroupOffsets(lib, consumer, rk)


def _cimpl_consumer() -> type:
    import confluent_kafka.cimpl

    return confluent_kafka.cimpl.Consumer


def send_offsets_to_transaction(
    producer: Any,
    positions: Sequence[TopicPartition],
    group: Any,
    timeout: float,
    encoding: CommitEncoding = CommitEncoding.NUL_TERMINATED,
) -> None:
    """``Producer.send_offsets_to_transaction`` with each offset's metadata sent as ``encoding`` says."""
    lib = Librdkafka.get()
    rk = None if lib is None else client_handle(lib, producer, RD_KAFKA_PRODUCER)
    if lib is None or rk is None or not isinstance(group, bytes):
        base = Producer.send_offsets_to_transaction  # confluent-kafka's own, even from a subclass overriding it
        if timeout is None or timeout < 0:
            base(producer, list(positions), group)
        else:
            base(producer, list(positions), group, timeout)
        return
    cgmd = ctypes.c_void_p()
    _raise_error(lib, lib.consumer_group_metadata_read(ctypes.byref(cgmd), group, len(group)))
    entries = [
        (tp.topic, tp.partition, tp.offset, None if tp.metadata is None else commit_metadata(tp.metadata, encoding))
        for tp in positions
    ]
    plist, _buffers = new_list(lib, entries)
    try:
        error = lib.send_offsets_to_transaction(rk, plist, cgmd, _timeout_ms(timeout))
    finally:
        destroy_list(lib, plist, owned_metadata=True)
        lib.consumer_group_metadata_destroy(cgmd)
    _raise_error(lib, error)


def _raise_error(lib: Librdkafka, error: int | None) -> None:
    """An ``rd_kafka_error_t`` as confluent-kafka raises it (code, text and the transaction flags)."""
    if not error:
        return
    try:
        raw = lib.error_string(error)
        kafka_error = KafkaError(
            lib.error_code(error),
            raw.decode("utf-8", "replace") if raw else None,
            fatal=bool(lib.error_is_fatal(error)),
            retriable=bool(lib.error_is_retriable(error)),
            txn_requires_abort=bool(lib.error_txn_requires_abort(error)),
        )
    finally:
        lib.error_destroy(error)
    raise KafkaException(kafka_error)
