"""What one Spark task does with one offset range: read back, assemble, resolve, emit Arrow batches.

The task yields ``pyarrow.RecordBatch`` objects rather than tuples: values are large binaries,
and Spark's tuple path converts every cell in Python before building the very same Arrow batch.
Batches are cut by row count and by bytes, because an Arrow binary column addresses at most
2 GiB and Spark holds a whole batch in memory on both sides of the worker pipe.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no stubs

from gateway import store_registry
from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.consumer.resolver import Resolver
from gateway.core.pipeline import ReferenceToResolve, WholeMessage, error_text
from gateway.encryption import KeyProvider, KmsKeyProvider, LocalKeyRing, ReferenceEncryption
from gateway.errors import ConfigurationError, GatewayError
from gateway.protocol.envelope_reader import EnvelopeKind, read_envelope
from gateway.protocol.headers import Headers
from gateway.protocol.peers.pointer_formats import pointed_locator
from gateway.protocol.records import Record
from gateway.spark.assembly import AssemblyLimits, owned_messages
from gateway.spark.cloud_stores import build_cloud_stores
from gateway.spark.offset_ranges import open_consumer, read_batches, watermarks
from gateway.spark.options import OptionError, SourceOptions
from gateway.spark.planning import DataLossError, OffsetRange
from gateway.spark.row_limits import check_row_value
from gateway.spark.schema import ENVELOPE_ARROW_SCHEMA, message_arrow_schema
from gateway.store import Store
from gateway.streams.payload_stream import PayloadStream

log = logging.getLogger(__name__)

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MAX_BATCH_ROWS = 2_000
MAX_BATCH_BYTES = 128 * 1024 * 1024


def _s3_client_args(options: SourceOptions) -> dict[str, Any]:
    from botocore.config import Config

    kwargs: dict[str, Any] = {}
    if options.s3_endpoint:
        kwargs["endpoint_url"] = options.s3_endpoint
    if options.s3_region:
        kwargs["region_name"] = options.s3_region
    if options.s3_access_key is not None:
        kwargs["aws_access_key_id"] = options.s3_access_key
        kwargs["aws_secret_access_key"] = options.s3_secret_key
    if options.s3_ca_bundle:
        kwargs["verify"] = options.s3_ca_bundle
    if options.s3_path_style:
        kwargs["config"] = Config(s3={"addressing_style": "path"})
    return kwargs


def key_provider(options: SourceOptions) -> KeyProvider | None:
    """The key provider the options name (a key ring or KMS), made in this process (executors make their own)."""
    if options.kms is not None:
        return KmsKeyProvider(options.kms.key_id, **options.kms.client_kwargs())
    if options.keyring is None:
        return None
    try:
        return LocalKeyRing.from_env() if options.keyring == "env" else LocalKeyRing.from_file(options.keyring)
    except ConfigurationError as exc:
        raise OptionError(f"encryption.keyring: {exc}") from None


def build_stores(options: SourceOptions) -> dict[str, Any]:
    """The payload stores named in the options, opened in this process (executors open their own)."""
    stores: dict[str, Store] = {}
    if options.redis_url:
        stores[options.redis_name] = store_registry.redis_store(
            store_registry.redis_client(options.redis_url),
            prefix=options.redis_prefix,
            name=options.redis_name,
            close_client=True,
        )
    stores.update(build_cloud_stores(options))
    if not options.s3_bucket and not options.peer_buckets:
        return stores
    import boto3

    if options.s3_bucket:
        stores[options.s3_name] = store_registry.s3_store(
            boto3.client("s3", **_s3_client_args(options)),
            bucket=options.s3_bucket,
            prefix=options.s3_prefix,
            name=options.s3_name,
            close_client=True,
        )
    for number, (bucket, prefix) in enumerate(options.peer_buckets, 1):
        # stores for reading only: the objects peers' pointers name, confined to these places
        stores[f"peer-{number}"] = store_registry.s3_store(
            boto3.client("s3", **_s3_client_args(options)),
            bucket=bucket,
            prefix=prefix,
            name=f"peer-{number}",
            close_client=True,
        )
    return stores


def close_stores(stores: dict[str, Store]) -> None:
    for store in stores.values():
        try:
            store.close()
        except Exception as exc:  # noqa: BLE001 - closing is best effort; the task's outcome is already decided
            log.debug("closing store %r failed: %s", store, exc)


class _Rows:
    """Column lists for one Arrow batch of the message schema."""

    def __init__(self, topic: str, partition: int, *, include_headers: bool = False) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[dict[str, Any]] | None] = []
        self.routes: list[str] = []
        self.starts: list[int] = []
        self.errors: list[str | None] = []
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, message: WholeMessage, key: bytes | None, value: bytes | None, error: str | None) -> None:
        record = message.record
        self.keys.append(key)
        self.values.append(value)
        self.offsets.append(record.offset)
        self.timestamps.append(None if record.timestamp_ms is None else record.timestamp_ms * 1000)
        self.timestamp_types.append(record.timestamp_type)
        self.headers.append(_headers(message.headers) if self.include_headers else None)
        self.routes.append(message.route.value)
        self.starts.append(message.starting_offset)
        self.errors.append(error)
        self.nbytes += (len(value) if value is not None else 0) + (len(key) if key else 0)

    def full(self) -> bool:
        return len(self.offsets) >= MAX_BATCH_ROWS or self.nbytes >= MAX_BATCH_BYTES

    def take(self) -> pa.RecordBatch:
        schema = message_arrow_schema(self.include_headers)
        n = len(self.offsets)
        columns = {
            "key": self.keys,
            "value": self.values,
            "topic": [self.topic] * n,
            "partition": [self.partition] * n,
            "offset": self.offsets,
            "timestamp": self.timestamps,
            "timestampType": self.timestamp_types,
            "headers": self.headers,
            "route": self.routes,
            "startingOffset": self.starts,
            "error": self.errors,
        }
        batch = pa.RecordBatch.from_arrays([pa.array(columns[f.name], f.type) for f in schema], schema=schema)
        self._reset()
        return batch


def _headers(headers: Headers | None) -> list[dict[str, Any]] | None:
    if not headers:
        return None
    return [{"key": k, "value": v} for k, v in headers]


def read_messages(options: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Every message owned by ``rng`` (see :mod:`gateway.spark`), as Arrow batches."""
    consumer = open_consumer(options)
    stores = build_stores(options)
    resolver = Resolver(
        stores,
        workers=options.fetch_workers,
        budget=options.fetch_budget,
        peer_max_bytes=options.peer_max_bytes,
        rules=options.reference_rules,
        encryption=ReferenceEncryption(key_provider(options)),
    )
    try:
        yield from _read(options, rng, consumer, ReferenceFetcher(resolver))
    finally:
        resolver.close()
        close_stores(stores)
        consumer.close()


def _read(options: SourceOptions, rng: OffsetRange, consumer: Any, refs: ReferenceFetcher) -> Iterator[pa.RecordBatch]:
    topic, partition = rng.tp
    low, _ = watermarks(consumer, [rng.tp])[rng.tp]
    emit_from, until = rng.from_offset, rng.until_offset
    if emit_from < low:
        if not rng.from_earliest:
            _data_loss(
                f"{topic}[{partition}]: offsets {emit_from}..{low - 1} were deleted before they were read",
                options.fail_on_data_loss,
            )
        emit_from = low
    if until <= emit_from:
        return
    timeout = options.poll_timeout_ms / 1000.0

    def fetch(start: int, end: int) -> Iterator[list[Record]]:
        return read_batches(
            consumer, topic, partition, start, end, timeout_s=timeout, fail_on_data_loss=options.fail_on_data_loss
        )

    def on_batch(batch: Sequence[Record]) -> None:
        if refs.enabled:
            refs.scan((r.offset, topic, r.value, r.headers) for r in batch if r.offset >= emit_from)

    rows = _Rows(topic, partition, include_headers=options.include_headers)
    for message in owned_messages(
        fetch, topic, partition, emit_from, until, low, _limits(options), on_batch=on_batch, on_restart=refs.clear
    ):
        key, value, error = _resolve(message, refs, topic, partition, options.fail_on_data_loss)
        rows.add(message, key, value, error)
        if rows.full():
            yield rows.take()
    if len(rows):
        yield rows.take()


def _limits(options: SourceOptions) -> AssemblyLimits:
    return AssemblyLimits(
        options.buffer_capacity,
        options.expiration_offset_gap,
        options.max_segments,
        options.max_message_bytes,
        options.lookback_offsets,
        options.peers,
    )


def _resolve(
    message: WholeMessage, refs: ReferenceFetcher, topic: str, partition: int, fail: bool
) -> tuple[bytes | None, bytes | None, str | None]:
    """The row's key and value, or its error: raised with ``failOnDataLoss``, else put in the ``error`` column.

    Envelopes and peers' pointers are judged by the consumer's own rules (the resolver's): the topic
    binding, the stores' confinement, and no payload of ours served through a peer's pointer."""
    error = message.error
    key = message.record.key
    try:
        if isinstance(message, ReferenceToResolve) and message.peer is not None:
            return *refs.resolve_peer(message.peer, topic=topic), None
        if isinstance(message, ReferenceToResolve) and message.envelope is not None:
            check_row_value(message.envelope.payload_size, f"{topic}[{partition}] offset {message.record.offset}")
            value = refs.resolve(message.record.offset, message.envelope, topic=topic)
            assert not isinstance(value, PayloadStream)  # a task's resolver streams nothing: a row holds its value
            return key, value, None
    except GatewayError as exc:
        error = error_text(exc)
    if error is None:
        return key, message.value, None
    if fail:
        raise DataLossError(
            f"{message.route.value} message at {topic}[{partition}] offset {message.record.offset} cannot be"
            f" delivered: {error}"
            " (set failOnDataLoss=false to get the row with its error instead)"
        )
    return key, None, error


def _data_loss(message: str, fail: bool) -> None:
    if fail:
        raise DataLossError(message + " (set failOnDataLoss=false to go on without it)")
    log.warning("%s; going on without it (failOnDataLoss=false)", message)


# -- the envelope scan (for reconcile) ----------------------------------------------------------


def read_envelopes(options: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Every envelope record in ``rng``: no read-back, since an envelope is always one record."""
    consumer = open_consumer(options)
    try:
        topic, partition = rng.tp
        low, _ = watermarks(consumer, [rng.tp])[rng.tp]
        start = rng.from_offset
        if start < low:
            if not rng.from_earliest:
                _data_loss(
                    f"{topic}[{partition}]: offsets {start}..{low - 1} were deleted before they were read",
                    options.fail_on_data_loss,
                )
            start = low
        if rng.until_offset <= start:
            return
        columns: dict[str, list[Any]] = {name: [] for name in ENVELOPE_ARROW_SCHEMA.names}
        for batch in read_batches(
            consumer,
            topic,
            partition,
            start,
            rng.until_offset,
            timeout_s=options.poll_timeout_ms / 1000.0,
            fail_on_data_loss=options.fail_on_data_loss,
        ):
            for record in batch:
                row = _envelope_row(topic, partition, record)
                if row is not None:
                    for name, value in zip(ENVELOPE_ARROW_SCHEMA.names, row, strict=True):
                        columns[name].append(value)
            if len(columns["offset"]) >= MAX_BATCH_ROWS:
                yield _envelope_batch(columns)
        if columns["offset"]:
            yield _envelope_batch(columns)
    finally:
        consumer.close()


def _envelope_row(topic: str, partition: int, record: Record) -> tuple[Any, ...] | None:
    """The envelope a record holds, as a row; ``None`` for every record that is not an envelope."""
    read = read_envelope(record.value, record.headers)
    ts = None if record.timestamp_ms is None else record.timestamp_ms * 1000
    if read.kind is EnvelopeKind.NONE:
        return _pointer_row(topic, partition, record, ts)
    if read.kind is EnvelopeKind.LOOKALIKE:
        return None  # a legacy value that only starts like an envelope is no envelope
    envelope = read.envelope
    if envelope is None:
        return (topic, partition, record.offset, ts, None, None, None, None, error_text(read.error or GatewayError()))
    return (
        topic,
        partition,
        record.offset,
        ts,
        envelope.store,
        envelope.locator,
        envelope.size,
        str(envelope.message_id),
        None,
    )


def _pointer_row(topic: str, partition: int, record: Record, ts: int | None) -> tuple[Any, ...] | None:
    """A pointer record (``reference.format=bakdata|aws``) references its object as an envelope would, so
    reconcile never calls that object an orphan; it names no store, so its own payload is not checked."""
    locator = pointed_locator(record.value, record.headers)
    if locator is None:
        return None
    message_id = locator.rpartition("/")[2]
    known = _UUID.fullmatch(message_id) is not None
    return (topic, partition, record.offset, ts, None, locator, None, message_id if known else None, None)


def _envelope_batch(columns: dict[str, list[Any]]) -> pa.RecordBatch:
    schema = ENVELOPE_ARROW_SCHEMA
    arrays = [pa.array(columns[f.name], f.type) for f in schema]
    for values in columns.values():
        values.clear()
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
