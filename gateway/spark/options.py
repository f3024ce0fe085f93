"""The ``hybrid-kafka`` options, parsed once into a picklable value.

Spark hands a data source its options as a case-insensitive dict of strings; the same options
must be understood on the driver (planning) and in every executor (reading), so they are parsed
into one frozen dataclass that travels inside the reader and each input partition. Parsing is
strict about values (a bad number fails the query at planning, not half-way through a job) and
about names: an option neither Spark's Kafka source nor this one knows is refused with its name,
since a misspelt ``startingOffsets`` would otherwise read the whole topic without a word.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from gateway.config import mask_url, redact_config
from gateway.consumer.config import peer_reader
from gateway.consumer.reference_rules import (
    DEFAULT_RULES,
    ReferenceRules,
    parse_topic_renames,
)
from gateway.errors import ConfigurationError
from gateway.protocol.peers import PeerReader
from gateway.protocol.records import TopicPartitionKey
from gateway.settings import SPARK, SPARK_SOURCE, Setting
from gateway.settings import consumer as keys
from gateway.settings import spark as spark_keys
from gateway.settings import stores as store_keys
from gateway.settings.shared import REFERENCE_MAX_PAYLOAD_BYTES
from gateway.spark.cloud_stores import CLOUD_STORE_OPTIONS, cloud_store_fields, cloud_store_names
from gateway.spark.kafkaconf import SPARK_REFUSED_SOURCE, KafkaOptionError, translate

EARLIEST = -2
"""Kafka's and Spark's spelling of "the first offset still in the log" in per-partition JSON."""
LATEST = -1
""""The high watermark at the time of planning" in per-partition JSON."""


_KAFKA_PREFIX = "kafka."
# Keys this source sets itself on every consumer: a user value would break the range reads.
_RESERVED_KAFKA_KEYS = frozenset({"enable.partition.eof", "enable.auto.offset.store"})

BATCH_GROUP_ID_PREFIX = "spark-kafka-relation"
"""Spark's Kafka source names a batch query's consumer group ``spark-kafka-relation-<uuid>``."""
STREAM_GROUP_ID_PREFIX = "spark-kafka-source"
"""... and a streaming query's ``spark-kafka-source-<uuid>-<hash of the checkpoint path>``."""
DEFAULT_NETWORK_TIMEOUT_MS = spark_keys.DEFAULT_NETWORK_TIMEOUT_MS
"""``spark.network.timeout`` unset (120s): the fallback of ``kafkaConsumer.pollTimeoutMs``, as in Spark."""


class OptionError(ValueError):
    """An option value this source cannot use; raised on the driver before any task starts."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """``earliest``, ``latest`` or explicit offsets per partition (-2 earliest, -1 latest).

    An explicit spec must name every partition the query reads, exactly, as Spark's Kafka source
    requires (checked at planning against the partitions found, :func:`check_names_all`);
    ``default`` only serves partitions that appear later in a stream.
    """

    kind: str  # "earliest" | "latest" | "specific"
    specific: tuple[tuple[TopicPartitionKey, int], ...] = ()
    default: int = EARLIEST

    def for_partition(self, tp: TopicPartitionKey) -> int:
        """The requested offset for ``tp``: an absolute offset, :data:`EARLIEST` or :data:`LATEST`."""
        if self.kind == "earliest":
            return EARLIEST
        if self.kind == "latest":
            return LATEST
        return dict(self.specific).get(tp, self.default)


def parse_offset_spec(
    text: str | None, *, name: str, default_kind: str, allow_earliest: bool = True, allow_latest: bool = True
) -> OffsetSpec:
    """``earliest``, ``latest`` or JSON; ``allow_*`` false refuse them as Spark refuses them for batch queries."""
    default = EARLIEST if default_kind == "earliest" else LATEST
    if text is None or not text.strip():
        return OffsetSpec(default_kind, (), default)
    raw = text.strip()
    lowered = raw.lower()
    if lowered in ("earliest", "latest"):
        if lowered == "earliest" and not allow_earliest:
            raise OptionError(
                f"{name}=earliest is refused for batch queries, as Spark's Kafka source refuses it"
                ' ("ending offset can\'t be earliest for batch queries on Kafka")'
            )
        if lowered == "latest" and not allow_latest:
            raise OptionError(
                f"{name}=latest is refused for batch queries, as Spark's Kafka source refuses it"
                ' ("starting offset can\'t be latest for batch queries on Kafka"): a batch would read nothing'
            )
        return OffsetSpec(lowered, (), default)
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f'{name} must be earliest, latest or JSON like {{"topic":{{"0":23}}}}: {exc}') from exc
    if not isinstance(parsed, dict):
        raise OptionError(f"{name} JSON must be an object of topics, got {type(parsed).__name__}")
    specific: list[tuple[TopicPartitionKey, int]] = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"{name}: topic {topic!r} must map partition numbers to offsets")
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except ValueError as exc:
                raise OptionError(f"{name}: {partition!r} of topic {topic!r} is not a partition number") from exc
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise OptionError(f"{name}: offset for {topic}[{partition}] must be an int >= -2, got {offset!r}")
            if offset == EARLIEST and not allow_earliest:
                raise OptionError(
                    f"{name}: -2 (earliest) for {topic}[{partition}] is refused for batch queries, as Spark's"
                    ' Kafka source refuses it ("ending offset for ... can\'t be earliest for batch queries on Kafka")'
                )
            if offset == LATEST and not allow_latest:
                raise OptionError(
                    f"{name}: -1 (latest) for {topic}[{partition}] is refused for batch queries, as Spark's"
                    ' Kafka source refuses it ("startingOffsets for ... can\'t be latest for batch queries on Kafka")'
                )
            specific.append(((str(topic), number), offset))
    return OffsetSpec("specific", tuple(sorted(specific)), default)


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions a query reads: named topics, topics matching a pattern, or named partitions.

    ``pattern`` follows Spark (a Java regex that must match the whole topic name); Python's ``re``
    reads the common patterns the same way (``events-.*``, ``(a|b)``, classes, anchors).
    """

    kind: str  # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartitionKey, ...] = ()


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribepattern", "assign") if opts.get(name, "").strip()]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        raise OptionError(f"exactly one of subscribe, subscribePattern and assign is required, got {what}")
    kind = given[0]
    text = opts[kind].strip()
    if kind == "subscribe":
        return Subscription("subscribe", tuple(t.strip() for t in text.split(",") if t.strip()))
    if kind == "subscribepattern":
        try:
            re.compile(text)
        except re.error as exc:
            raise OptionError(f"subscribePattern {text!r} is not a regular expression: {exc}") from exc
        return Subscription("subscribePattern", pattern=text)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f'assign must be JSON like {{"topic":[0,1]}}: {exc}') from exc
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError('assign must be a non-empty JSON object like {"topic":[0,1]}')
    partitions: list[TopicPartitionKey] = []
    for topic, numbers in parsed.items():
        if not isinstance(numbers, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            raise OptionError(f"assign: topic {topic!r} must map to a list of partition numbers")
        partitions.extend((str(topic), int(n)) for n in numbers if n >= 0)
    return Subscription(
        "assign", tuple(sorted({tp[0] for tp in partitions})), partitions=tuple(sorted(set(partitions)))
    )


@dataclass(frozen=True, slots=True)
class TimestampSpec:
    """Offsets by timestamp: one for every partition, or per partition (others fall back to ``default``)."""

    every: int | None = None
    specific: tuple[tuple[TopicPartitionKey, int], ...] = ()

    def for_partition(self, tp: TopicPartitionKey) -> int | None:
        if self.every is not None:
            return self.every
        return dict(self.specific).get(tp)


def parse_timestamps(opts: Mapping[str, str], single: str, by_partition: str) -> TimestampSpec | None:
    """``startingTimestamp`` wins over ``startingOffsetsByTimestamp`` (and so for ending), as in Spark."""
    every = _read(spark_keys.STARTING_TIMESTAMP if single == "startingTimestamp" else spark_keys.ENDING_TIMESTAMP, opts)
    if every is not None:
        return TimestampSpec(every=every)
    text = opts.get(by_partition.lower(), "").strip()
    if not text:
        return None
    spec = parse_offset_spec(text, name=by_partition, default_kind="latest")
    if spec.kind != "specific" or any(ts < 0 for _, ts in spec.specific):
        raise OptionError(f'{by_partition} must be JSON like {{"topic":{{"0":1700000000000}}}} with times >= 0')
    return TimestampSpec(specific=spec.specific)


T = TypeVar("T")


def _read(setting: Setting[T], options: Mapping[str, str]) -> T:
    """An option through its declaration (:mod:`gateway.settings`), refused as an :class:`OptionError`."""
    return setting.option(options, OptionError)


@dataclass(frozen=True, slots=True)
class KmsOptions:
    """``encryption.kms.*``: the KMS key and how each executor reaches KMS.

    Without keys, boto3 finds credentials on each executor as it does anywhere (environment, instance
    or pod role): the usual choice on a cluster, where options would put keys in every task.
    """

    key_id: str
    region: str | None = None
    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)

    def client_kwargs(self) -> dict[str, str]:
        """boto3 ``client("kms", ...)`` arguments: only those given."""
        given = {
            "region_name": self.region,
            "endpoint_url": self.endpoint,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
        }
        return {name: value for name, value in given.items() if value is not None}


def options_repr(options: Any) -> str:
    """A dataclass's repr with the secrets of its Kafka settings and its URLs' passwords masked.

    Spark shows options objects in plans, task failures and logs; the Kafka settings there carry
    ``sasl.password``, ``sasl.oauthbearer.config`` and the like, and ``redis.url`` may carry a password.
    """
    shown = []
    for f in fields(options):
        if not f.repr:
            continue
        value = getattr(options, f.name)
        if isinstance(value, Mapping):
            value = redact_config(value)
        elif isinstance(value, str) and "://" in value:
            value = mask_url(value)
        shown.append(f"{f.name}={value!r}")
    return f"{type(options).__name__}({', '.join(shown)})"


@dataclass(frozen=True)
class SourceOptions:
    """Everything a planner or a range task needs to know, with defaults applied."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    kafka_config: Mapping[str, str] = field(default_factory=dict)
    starting_offsets: OffsetSpec = OffsetSpec("earliest")
    ending_offsets: OffsetSpec = OffsetSpec("latest", (), LATEST)
    fail_on_data_loss: bool = spark_keys.FAIL_ON_DATA_LOSS.default
    subscription: Subscription | None = None
    """None means ``subscribe`` to ``topics``."""
    starting_timestamps: TimestampSpec | None = None
    ending_timestamps: TimestampSpec | None = None
    timestamp_strategy: str = "error"
    """``startingOffsetsByTimestampStrategy``: what a starting timestamp after a partition's last record does."""
    include_headers: bool = spark_keys.INCLUDE_HEADERS.default
    """``includeHeaders``: true by default, the API promises a ``headers`` column; false drops it as Spark does."""
    # stores
    keyring: str | None = None
    """``encryption.keyring``: ``env`` (``GATEWAY_KEYRING_*`` on each executor) or a key ring file's path there."""
    kms: KmsOptions | None = None
    """``encryption.kms.*``: AWS KMS as the key provider instead of a key ring."""
    redis_url: str | None = None
    redis_prefix: str = "gw"
    redis_name: str = "redis"
    s3_endpoint: str | None = None
    s3_bucket: str | None = None
    s3_prefix: str = "gw/"
    s3_region: str | None = None
    s3_access_key: str | None = None
    s3_secret_key: str | None = field(default=None, repr=False)
    s3_name: str = "s3"
    s3_path_style: bool = True
    s3_ca_bundle: str | None = None
    """``s3.ca.bundle``: the PEM CA file an HTTPS endpoint is verified with on every executor (boto3's ``verify=``)."""
    gcs_endpoint: str | None = None
    gcs_bucket: str | None = None
    gcs_prefix: str = "gw/"
    gcs_name: str = "gcs"
    azure_connection_string: str | None = field(default=None, repr=False)
    azure_container: str | None = None
    azure_prefix: str = "gw/"
    azure_name: str = "azure"
    fetch_workers: int = keys.FETCH_WORKERS.default
    fetch_budget: int = keys.FETCH_BUDGET_BYTES.default
    reference_rules: ReferenceRules = DEFAULT_RULES
    """``reference.max.payload.bytes`` and ``reference.topic.renames``, as the consumer's keys."""
    # records other libraries wrote
    peers: PeerReader | None = None
    peer_max_bytes: int = keys.PEER_MAX_BYTES.default
    peer_buckets: tuple[tuple[str, str], ...] = ()
    """``peer.s3.buckets``: ``(bucket, prefix)`` of each place peers' objects may be read from."""
    # assembler
    buffer_capacity: int = keys.BUFFER_CAPACITY.default
    expiration_offset_gap: int = keys.EXPIRATION_OFFSET_GAP.default
    max_segments: int = keys.MAX_SEGMENTS.default
    max_message_bytes: int | None = None
    lookback_offsets: int = keys.EXPIRATION_OFFSET_GAP.default + 1
    # planning
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = DEFAULT_NETWORK_TIMEOUT_MS
    high_watermark_from: str = spark_keys.HIGH_WATERMARK_FROM.default
    group_id: str = field(default_factory=lambda: f"{BATCH_GROUP_ID_PREFIX}-{uuid.uuid4()}")

    def __repr__(self) -> str:
        return options_repr(self)

    @property
    def has_stores(self) -> bool:
        return self.redis_url is not None or self.s3_bucket is not None or bool(cloud_store_names(self))

    def consumer_config(self) -> dict[str, Any]:
        """The confluent-kafka config of every consumer this source opens (planner and tasks).

        Range reads use ``assign`` only (no group join, no commits); end of partition must be
        reported so a task can tell "the range's tail holds no visible record" from "wait". A
        task reads one partition in bulk, so fetches are larger than librdkafka's 1 MiB default
        (faster on segments of a few hundred KB, see docs/spark.md, "Options"); ``kafka.*`` options
        override both.
        """
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "fetch.wait.max.ms": 100,
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
        }
        conf.update(self.kafka_config)
        conf.update(
            {
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",
            }
        )
        return conf


def parse_options(
    options: Mapping[str, str], *, streaming: bool, network_timeout_ms: int = DEFAULT_NETWORK_TIMEOUT_MS
) -> SourceOptions:
    """Validate Spark's option map (keys arrive lower-cased) into :class:`SourceOptions`.

    ``network_timeout_ms`` is the session's ``spark.network.timeout``, the default of
    ``kafkaConsumer.pollTimeoutMs`` as in Spark's source (:func:`gateway.spark.register` reads it).
    """
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    bootstrap = opts.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise OptionError("option kafka.bootstrap.servers is required")
    check_known(opts)
    subscription = parse_subscription(opts)
    topics = subscription.topics
    if subscription.kind == "subscribe" and not topics:
        raise OptionError("option subscribe (comma-separated topics) is required")
    kafka_config = source_kafka_config(opts)
    group_id = kafka_config.pop("group.id", None)
    starting = parse_offset_spec(
        opts.get("startingoffsets"),
        name="startingOffsets",
        default_kind="latest" if streaming else "earliest",
        allow_latest=streaming,
    )
    ending = parse_offset_spec(
        opts.get("endingoffsets"), name="endingOffsets", default_kind="latest", allow_earliest=False
    )
    ending_names = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
    if streaming and any(name in opts for name in ending_names):
        raise OptionError(
            "endingOffsets, endingTimestamp and endingOffsetsByTimestamp are for batch queries"
            ' (Spark\'s Kafka source: "ending offset not valid in streaming queries")'
        )
    strategy_setting = spark_keys.TIMESTAMP_STRATEGY
    strategy = opts.get(strategy_setting.key.lower(), strategy_setting.default).strip().lower()
    if strategy not in strategy_setting.choices:  # Spark's words, not the schema's "one of"
        raise OptionError(f"{strategy_setting.key} must be {' or '.join(strategy_setting.choices)}, got {strategy!r}")
    for refused in _REFUSED:
        if refused in opts:
            raise OptionError(
                f"option {_CASED.get(refused, refused)} is not supported by hybrid-kafka: {_REFUSED[refused]}"
            )
    gap = _read(keys.EXPIRATION_OFFSET_GAP, opts)
    capacity = _read(keys.BUFFER_CAPACITY, opts)
    high_setting = spark_keys.HIGH_WATERMARK_FROM
    high_from = opts.get(high_setting.key.lower(), high_setting.default)
    cased = {choice.lower(): choice for choice in high_setting.choices}
    if high_from.lower() not in cased:  # Spark's casing kept in the message
        raise OptionError(f"{high_setting.key} must be {' or '.join(high_setting.choices)}, got {high_from!r}")
    if group_id is None:
        prefix = _read(spark_keys.GROUP_ID_PREFIX, opts) or (
            STREAM_GROUP_ID_PREFIX if streaming else BATCH_GROUP_ID_PREFIX
        )
        group_id = f"{prefix}-{uuid.uuid4()}"
    return SourceOptions(
        bootstrap_servers=bootstrap,
        topics=topics,
        kafka_config=kafka_config,
        starting_offsets=starting,
        ending_offsets=ending,
        fail_on_data_loss=_read(spark_keys.FAIL_ON_DATA_LOSS, opts),
        **store_fields(opts),
        fetch_workers=_read(keys.FETCH_WORKERS, opts),
        fetch_budget=_read(keys.FETCH_BUDGET_BYTES, opts),
        reference_rules=reference_rules(opts),
        buffer_capacity=capacity,
        expiration_offset_gap=gap,
        max_segments=_read(keys.MAX_SEGMENTS, opts),
        max_message_bytes=_read(keys.MAX_MESSAGE_BYTES, opts),
        lookback_offsets=_or(_read(spark_keys.LOOKBACK_OFFSETS, opts), gap + 1),
        max_offsets_per_trigger=_read(spark_keys.MAX_OFFSETS_PER_TRIGGER, opts),
        min_partitions=_read(spark_keys.MIN_PARTITIONS, opts),
        max_records_per_partition=_read(spark_keys.MAX_RECORDS_PER_PARTITION, opts),
        poll_timeout_ms=_or(_read(spark_keys.POLL_TIMEOUT_MS, opts), network_timeout_ms),
        high_watermark_from=cased[high_from.lower()],
        subscription=subscription,
        starting_timestamps=parse_timestamps(opts, "startingTimestamp", "startingOffsetsByTimestamp"),
        ending_timestamps=parse_timestamps(opts, "endingTimestamp", "endingOffsetsByTimestamp"),
        timestamp_strategy=strategy,
        include_headers=include_headers(opts),
        group_id=group_id,
        **peer_fields(opts),
    )


def _or(value: int | None, default: int) -> int:
    """An option whose default is another value (``lookbackOffsets``: the gap + 1)."""
    return default if value is None else value


def include_headers(opts: Mapping[str, str]) -> bool:
    """``includeHeaders``: whether rows have a ``headers`` column at all.

    True by default, unlike Spark's false: the ``hybrid-kafka`` schema promised to users has always carried
    ``headers`` (where LinkedIn's ``_lm`` and envelope headers are visible), and a default that removed a
    column would break every reader written against it. ``includeHeaders=false`` gives Spark's schema.
    """
    return _read(spark_keys.INCLUDE_HEADERS, {str(k).lower(): str(v) for k, v in opts.items()})


def source_kafka_config(opts: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options of a read, prefix stripped, refused or translated (:mod:`gateway.spark.kafkaconf`)."""
    raw: dict[str, str] = {}
    for key, value in opts.items():
        if key.startswith(_KAFKA_PREFIX) and key != "kafka.bootstrap.servers":
            inner = key[len(_KAFKA_PREFIX) :]
            if inner in _RESERVED_KAFKA_KEYS:
                raise OptionError(f"option {key} is managed by hybrid-kafka and cannot be set")
            raw[inner] = value
    try:
        return translate(raw, SPARK_REFUSED_SOURCE)
    except KafkaOptionError as exc:
        raise OptionError(str(exc)) from None


_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def network_timeout_ms(value: str | None) -> int:
    """``spark.network.timeout`` in ms, from Spark's time strings (``120s``, ``2min``; a bare number is seconds)."""
    if value is None or not value.strip():
        return DEFAULT_NETWORK_TIMEOUT_MS
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
    if match is None or match.group(2) not in ("", *_TIME_UNITS_MS):
        raise OptionError(f"spark.network.timeout {value!r} is not a time such as 120s")
    return max(1, int(int(match.group(1)) * _TIME_UNITS_MS[match.group(2) or "s"]))


STORE_OPTIONS = (
    *(setting.key for setting in store_keys.REDIS_AND_S3),
    *CLOUD_STORE_OPTIONS,
    *(setting.key for setting in store_keys.ENCRYPTION),
)
"""The payload store options, the same for the reader and the sink."""


def _kms_options(opts: Mapping[str, str]) -> KmsOptions | None:
    access, secret = _read(store_keys.KMS_ACCESS_KEY, opts), _read(store_keys.KMS_SECRET_KEY, opts)
    if (access is None) != (secret is None):
        raise OptionError("encryption.kms.access.key and encryption.kms.secret.key go together")
    key = _read(store_keys.KMS_KEY, opts)
    if key is None:
        given = (store_keys.KMS_REGION, store_keys.KMS_ENDPOINT, store_keys.KMS_ACCESS_KEY)
        rest = [setting.key for setting in given if _read(setting, opts)]
        if rest:
            raise OptionError(f"{rest[0]} is given without encryption.kms.key (the key id, ARN or alias)")
        return None
    region, endpoint = _read(store_keys.KMS_REGION, opts), _read(store_keys.KMS_ENDPOINT, opts)
    return KmsOptions(key, region, endpoint, access, secret)


def store_fields(opts: Mapping[str, str]) -> dict[str, Any]:
    """The :class:`SourceOptions` fields that describe the payload stores (keys lower-cased)."""
    fields: dict[str, Any] = {
        "redis_url": _read(store_keys.REDIS_URL, opts),
        "redis_prefix": _read(store_keys.REDIS_PREFIX, opts),
        "redis_name": _read(store_keys.REDIS_NAME, opts),
        "s3_endpoint": _read(store_keys.S3_ENDPOINT, opts),
        "s3_bucket": _read(store_keys.S3_BUCKET, opts),
        "s3_prefix": _read(store_keys.S3_PREFIX, opts),
        "s3_region": _read(store_keys.S3_REGION, opts),
        "s3_access_key": _read(store_keys.S3_ACCESS_KEY, opts),
        "s3_secret_key": _read(store_keys.S3_SECRET_KEY, opts),
        "s3_name": _read(store_keys.S3_NAME, opts),
        "s3_path_style": _read(store_keys.S3_PATH_STYLE, opts),
        "s3_ca_bundle": _read(store_keys.S3_CA_BUNDLE, opts),
        "keyring": _read(store_keys.ENCRYPTION_KEYRING, opts),
        "kms": _kms_options(opts),
    }
    if (fields["s3_access_key"] is None) != (fields["s3_secret_key"] is None):
        raise OptionError("s3.access.key and s3.secret.key go together")
    if fields["keyring"] is not None and fields["kms"] is not None:
        raise OptionError("encryption.keyring and encryption.kms.key name two key providers: give one")
    try:
        fields.update(cloud_store_fields(opts))
    except ConfigurationError as exc:
        raise OptionError(str(exc)) from None
    return fields


def reference_rules(opts: Mapping[str, str]) -> ReferenceRules:
    """What envelopes a task fetches, from the consumer's keys (:mod:`gateway.consumer.reference_rules`)."""
    try:
        renames = parse_topic_renames(_read(keys.TOPIC_RENAMES, opts))
    except ConfigurationError as exc:
        raise OptionError(str(exc)) from None
    return ReferenceRules(_read(REFERENCE_MAX_PAYLOAD_BYTES, opts), renames)


def peer_fields(opts: Mapping[str, str]) -> dict[str, Any]:
    """The :class:`SourceOptions` fields for records other libraries wrote (the consumer's keys, plus buckets)."""
    try:
        peers = peer_reader(dict(opts))
    except ConfigurationError as exc:
        raise OptionError(str(exc)) from None
    buckets = []
    for entry in (_read(spark_keys.PEER_S3_BUCKETS, opts) or "").split(","):
        bucket, _, prefix = entry.strip().partition("/")
        if bucket:
            buckets.append((bucket, prefix))
    if buckets and not peers:
        raise OptionError("peer.s3.buckets needs large.message.peer.formats")
    return {
        "peers": peers,
        "peer_max_bytes": _read(keys.PEER_MAX_BYTES, opts),
        "peer_buckets": tuple(buckets),
    }


# -- option names ------------------------------------------------------------------------------

_SPARK_OPTIONS = tuple(setting.key for setting in SPARK_SOURCE)
"""Spark's Kafka source options: all are known here, a few refused (:data:`_REFUSED`), two without effect."""

OWN_OPTIONS = (
    *STORE_OPTIONS,
    *(setting.key for setting in SPARK if setting not in SPARK_SOURCE and setting.key not in STORE_OPTIONS),
)
"""Options only ``hybrid-kafka`` has (declared in :mod:`gateway.settings`, GCS's and Azure's by their stores)."""

_REFUSED = {
    "minoffsetspertrigger": "micro-batches are never delayed to collect a minimum; use maxOffsetsPerTrigger",
    "maxtriggerdelay": "it only goes with minOffsetsPerTrigger",
}
_CASED = {name.lower(): name for name in (*_SPARK_OPTIONS, *OWN_OPTIONS)}
KNOWN_OPTIONS = frozenset(_CASED)
"""Every option name this source accepts, lower-cased as Spark hands them over (plus ``kafka.*``)."""


def check_known(opts: Mapping[str, str]) -> None:
    """Refuse any option neither Spark's Kafka source nor this one knows, naming each."""
    unknown = sorted(k for k in opts if k not in KNOWN_OPTIONS and not k.startswith(_KAFKA_PREFIX))
    if unknown:
        raise OptionError(
            f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for hybrid-kafka"
            " (Spark's Kafka source options, kafka.* and the options in docs/spark.md are accepted)"
        )
