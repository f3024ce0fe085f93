"""``df.write.format("hybrid-kafka")`` and ``writeStream``: each row sent plain, chunked or by reference.

The columns are those of Spark's Kafka sink (``key``, ``value``, ``topic``, ``partition``,
``headers``); the producer settings are ``kafka.*`` options, the size policy and the stores are
options too, the stores named exactly as the reader names them. Every task runs one
:class:`~gateway.HybridProducer`, so a row whose envelope Kafka refuses has its payload deleted
again, as in any producer, and the pending mark of a write whose outcome is unknown (a task killed
between the store write and the acknowledgement) is what ``gateway gc`` and ``reconcile`` find.
The protocol's own headers (``_lm``, ``_t``, ``_so``, the envelope header) in a ``headers`` column
are left out: rows read from a ``hybrid-kafka`` source carry them, and the sink writes its own.

Delivery is at least once, as with Spark's Kafka sink: a task or micro-batch that Spark retries
writes its rows again. What a failed attempt leaves in the stores is either referenced by an
envelope it managed to write or marked pending, never unaccounted for.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from gateway.core.outgoing import RESERVED_HEADERS
from gateway.errors import ConfigurationError, GatewayError
from gateway.policy import SizeThresholdPolicy
from gateway.protocol.payload_encoding import parse_compression
from gateway.settings import spark as spark_keys
from gateway.settings.producer import REFERENCE_COMPRESSION
from gateway.settings.shared import REFERENCE_ENCRYPTION
from gateway.spark.cloud_stores import cloud_store_names
from gateway.spark.kafkaconf import SPARK_REFUSED_SINK, KafkaOptionError, translate
from gateway.spark.options import (
    _KAFKA_PREFIX,
    STORE_OPTIONS,
    OptionError,
    SourceOptions,
    _read,
    options_repr,
    store_fields,
)
from gateway.spark.row_limits import check_row_value

log = logging.getLogger(__name__)

SINK_OPTIONS = (
    *(setting.key for setting in spark_keys.SINK),
    REFERENCE_ENCRYPTION.key,
    REFERENCE_COMPRESSION.key,
    *STORE_OPTIONS,
)
"""Options the sink takes beside ``kafka.*`` (declared in :mod:`gateway.settings`)."""
_SPARK_WRITE_OPTIONS = ("checkpointLocation", "includeHeaders")
"""Spark's own, handed to every streaming sink, and ``includeHeaders``, which Spark's Kafka sink takes and
ignores (a ``headers`` column is written whenever there is one): a job's reader options can be reused."""
_SINK_KNOWN = frozenset(name.lower() for name in (*SINK_OPTIONS, *_SPARK_WRITE_OPTIONS))
_COLUMNS = frozenset({"key", "value", "topic", "partition", "headers"})


class SinkWriteError(GatewayError):
    """Rows of a task could not all be delivered; the task fails and Spark may retry it."""


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    producer_config: Mapping[str, str]
    topic: str | None
    segment_bytes: int | None
    reference_above: int | None
    reference_store: str | None
    stores: SourceOptions = field(repr=False)
    encryption: str = "none"
    """``reference.encryption``: ``aes256-gcm`` seals payloads under the ``encryption.keyring`` key ring or
    the ``encryption.kms.key`` KMS key."""
    compression: str | None = None
    """``reference.compression``: the codec of stored payloads (``None`` stores them as they are)."""

    def __repr__(self) -> str:
        return options_repr(self)

    def policy(self) -> SizeThresholdPolicy:
        store = self.reference_store
        if self.reference_above is not None and store is None:
            named = [
                n
                for n in (
                    self.stores.redis_url and self.stores.redis_name,
                    self.stores.s3_bucket and self.stores.s3_name,
                    *cloud_store_names(self.stores),
                )
                if n
            ]
            if len(named) != 1:
                raise OptionError("reference.above needs reference.store when there is not exactly one store")
            store = named[0]
        return SizeThresholdPolicy(reference_above=self.reference_above, store=store)

    def producer(self, stores: Mapping[str, Any]) -> Any:
        from gateway.producer import HybridProducer

        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, **self.producer_config}
        conf["logger"] = logging.getLogger("gateway.kafka")  # librdkafka's lines through Python logging
        if self.segment_bytes is not None:
            conf["max.message.segment.bytes"] = self.segment_bytes
        conf["reference.encryption"] = self.encryption
        conf["reference.compression"] = self.compression or "none"
        from gateway.spark.reading import key_provider

        return HybridProducer(conf, policy=self.policy(), stores=stores, key_provider=key_provider(self.stores))


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Spark's option map (keys lower-cased) for a write; unknown keys are refused by name."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    unknown = sorted(k for k in opts if k not in _SINK_KNOWN and not k.startswith(_KAFKA_PREFIX))
    if unknown:
        raise OptionError(
            f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for hybrid-kafka writes"
        )
    bootstrap = opts.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise OptionError("option kafka.bootstrap.servers is required")
    _read(spark_keys.INCLUDE_HEADERS, opts)  # a value that is not a boolean is a mistake however it is used
    raw = {k[len(_KAFKA_PREFIX) :]: v for k, v in opts.items() if k.startswith(_KAFKA_PREFIX)}
    raw.pop("bootstrap.servers", None)
    try:
        producer = translate(raw, SPARK_REFUSED_SINK)
    except KafkaOptionError as exc:
        raise OptionError(str(exc)) from None
    stores = SourceOptions(bootstrap, (), **store_fields(opts))
    result = SinkOptions(
        bootstrap_servers=bootstrap,
        producer_config=producer,
        topic=_read(spark_keys.SINK_TOPIC, opts),
        segment_bytes=_read(spark_keys.SINK_SEGMENT_BYTES, opts),
        reference_above=_read(spark_keys.SINK_REFERENCE_ABOVE, opts),
        reference_store=_read(spark_keys.SINK_REFERENCE_STORE, opts),
        stores=stores,
        encryption=(opts.get(REFERENCE_ENCRYPTION.key) or REFERENCE_ENCRYPTION.default).lower(),
        compression=_compression(opts),
    )
    if result.encryption not in REFERENCE_ENCRYPTION.choices:  # in the words the sink has always used
        choices = " or ".join(REFERENCE_ENCRYPTION.choices)
        raise OptionError(f"{REFERENCE_ENCRYPTION.key} must be {choices}, got {result.encryption!r}")
    if result.encryption != "none" and stores.keyring is None and stores.kms is None:
        raise OptionError(
            "reference.encryption=aes256-gcm needs encryption.keyring (env or a key ring file) or encryption.kms.key"
        )
    result.policy()  # refuse a policy without its store on the driver, before any task starts
    return result


def check_columns(schema: Any, options: SinkOptions) -> None:
    names = {f.name.lower() for f in schema.fields}
    if "value" not in names:
        raise OptionError("a hybrid-kafka write needs a value column")
    if options.topic is None and "topic" not in names:
        raise OptionError("a hybrid-kafka write needs a topic column or the topic option")
    extra = sorted(names - _COLUMNS)
    if extra:
        raise OptionError(
            f"columns {', '.join(extra)} are not Kafka record fields (key, value, topic, partition, headers)"
        )


@dataclass
class SinkCommit(WriterCommitMessage):
    rows: int = 0
    routes: dict[str, int] = field(default_factory=dict)


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def write_rows(options: SinkOptions, rows: Iterator[Any]) -> SinkCommit:
    """Send every row through one producer; raise :class:`SinkWriteError` if any was not delivered."""
    from gateway.spark.reading import build_stores, close_stores

    stores = build_stores(options.stores)
    producer = options.producer(stores)
    failures: list[Any] = []
    commit = SinkCommit()

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err)

    try:
        for row in rows:
            if failures:
                break
            fields = row.asDict()
            topic = options.topic or fields.get("topic")
            if not topic:
                raise SinkWriteError("a row has no topic (set the topic option or fill the topic column)")
            value = _bytes(fields.get("value"))
            check_row_value(len(value or b""), f"a row for topic {topic!r}")
            route = producer.route_for(topic, len(value or b""))
            _produce(producer, topic, value, fields, delivered)
            commit.rows += 1
            commit.routes[route.kind.value] = commit.routes.get(route.kind.value, 0) + 1
    finally:
        left = producer.flush()  # delivered rows keep their payloads, refused ones are rolled back
        producer.close()
        close_stores(stores)
    if failures or left:
        raise SinkWriteError(
            f"{len(failures)} of {commit.rows} rows were not delivered ({left} still in flight): {failures[:1]}"
        )
    return commit


def _produce(producer: Any, topic: str, value: bytes | None, fields: Mapping[str, Any], on_delivery: Any) -> None:
    headers = fields.get("headers")
    partition = fields.get("partition")
    kwargs: dict[str, Any] = {
        "key": _bytes(fields.get("key")),
        "partition": -1 if partition is None else int(partition),
        "headers": None
        if headers is None
        else [(h["key"], _bytes(h["value"])) for h in headers if h["key"] not in RESERVED_HEADERS],
        "on_delivery": on_delivery,
    }
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(0.1)


class HybridKafkaWriter(DataSourceWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        return write_rows(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, SinkCommit))
        log.info("hybrid-kafka write committed: %d rows", rows)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Rows already in Kafka stay (Kafka has no undo); their payloads stay with them."""
        log.warning("hybrid-kafka write aborted; delivered rows stay in Kafka (at least once)")


class HybridKafkaStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        return write_rows(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("hybrid-kafka micro-batch %d committed", batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("hybrid-kafka micro-batch %d aborted; delivered rows stay in Kafka (at least once)", batchId)


def _compression(opts: Mapping[str, str]) -> str | None:
    try:
        return parse_compression(opts.get(REFERENCE_COMPRESSION.key) or None)
    except ConfigurationError as exc:
        raise OptionError(str(exc)) from None
