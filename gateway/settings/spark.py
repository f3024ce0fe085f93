"""Options only the ``hybrid-kafka`` Spark source has (its other options are the consumer's and the stores')."""

from __future__ import annotations

from typing import Any

from gateway.settings._kinds import BoolSetting, ChoiceSetting, OptionalIntSetting, Setting, TextSetting, ValueSetting

DEFAULT_NETWORK_TIMEOUT_MS = 120_000
"""``spark.network.timeout`` unset (120s): the fallback of ``kafkaConsumer.pollTimeoutMs``, as in Spark."""

LOOKBACK_OFFSETS = OptionalIntSetting(
    "lookbackOffsets",
    None,
    "how far before a range a task starts reading, for the segments of a message that ends inside it",
    spark="lookbackOffsets",
    minimum=0,
    default_doc="message.assembler.expiration.offset.gap + 1",
)
HIGH_WATERMARK_FROM = ChoiceSetting(
    "highWatermarkFrom",
    "listOffsets",
    "where planning takes each partition's end: listOffsets or fetch",
    spark="highWatermarkFrom",
    choices=("listOffsets", "fetch"),
)
PEER_S3_BUCKETS = TextSetting(
    "peer.s3.buckets",
    None,
    "bucket/prefix of each place peers' objects may be read from, comma-separated",
    spark="peer.s3.buckets",
)

SPARK_ONLY: tuple[Setting[Any], ...] = (LOOKBACK_OFFSETS, HIGH_WATERMARK_FROM, PEER_S3_BUCKETS)
"""Options only this source has, beside the consumer's keys and the stores'."""


SUBSCRIBE = ValueSetting(
    "subscribe", None, "comma-separated topics (or subscribePattern, or assign)", spark="subscribe"
)
SUBSCRIBE_PATTERN = ValueSetting(
    "subscribePattern", None, "a regular expression matched against topic names", spark="subscribePattern"
)
ASSIGN = ValueSetting("assign", None, 'JSON {"topic":[0,1]}: exactly these partitions', spark="assign")
STARTING_OFFSETS = ValueSetting(
    "startingOffsets", None, "earliest, latest or JSON offsets per partition", spark="startingOffsets"
)
ENDING_OFFSETS = ValueSetting(
    "endingOffsets", None, "batch only: latest or JSON offsets per partition", spark="endingOffsets"
)
STARTING_TIMESTAMP = OptionalIntSetting(
    "startingTimestamp", None, "record time to start at on every partition", minimum=0, spark="startingTimestamp"
)
ENDING_TIMESTAMP = OptionalIntSetting(
    "endingTimestamp", None, "batch only: record time to end at", minimum=0, spark="endingTimestamp"
)
STARTING_BY_TIMESTAMP = ValueSetting(
    "startingOffsetsByTimestamp", None, "JSON record times per partition", spark="startingOffsetsByTimestamp"
)
ENDING_BY_TIMESTAMP = ValueSetting(
    "endingOffsetsByTimestamp", None, "batch only: JSON times per partition", spark="endingOffsetsByTimestamp"
)
TIMESTAMP_STRATEGY = ChoiceSetting(
    "startingOffsetsByTimestampStrategy",
    "error",
    "a starting timestamp after a partition's last record: error fails, latest starts at the end",
    choices=("error", "latest"),
    spark="startingOffsetsByTimestampStrategy",
)
FAIL_ON_DATA_LOSS = BoolSetting(
    "failOnDataLoss", True, "fail the query when offsets or payloads are gone", spark="failOnDataLoss"
)
POLL_TIMEOUT_MS = OptionalIntSetting(
    "kafkaConsumer.pollTimeoutMs",
    None,
    "fail a task when no record arrives for this long",
    minimum=1,
    default_doc="the session's spark.network.timeout",
    fallback=DEFAULT_NETWORK_TIMEOUT_MS,
    spark="kafkaConsumer.pollTimeoutMs",
)
FETCH_OFFSET_RETRIES = ValueSetting(
    "fetchOffset.numRetries", None, "accepted, without effect", spark="fetchOffset.numRetries"
)
FETCH_OFFSET_RETRY_INTERVAL = ValueSetting(
    "fetchOffset.retryIntervalMs", None, "accepted, without effect", spark="fetchOffset.retryIntervalMs"
)
MAX_OFFSETS_PER_TRIGGER = OptionalIntSetting(
    "maxOffsetsPerTrigger",
    None,
    "stream: at most this many offsets per micro-batch",
    minimum=1,
    spark="maxOffsetsPerTrigger",
)
MIN_OFFSETS_PER_TRIGGER = ValueSetting("minOffsetsPerTrigger", None, "refused", spark="minOffsetsPerTrigger")
MAX_TRIGGER_DELAY = ValueSetting("maxTriggerDelay", None, "refused", spark="maxTriggerDelay")
MIN_PARTITIONS = OptionalIntSetting(
    "minPartitions", None, "split the largest ranges until there are this many tasks", minimum=1, spark="minPartitions"
)
MAX_RECORDS_PER_PARTITION = OptionalIntSetting(
    "maxRecordsPerPartition",
    None,
    "split a partition range larger than this",
    minimum=1,
    spark="maxRecordsPerPartition",
)
GROUP_ID_PREFIX = TextSetting("groupIdPrefix", None, "the consumers' group.id prefix", spark="groupIdPrefix")
INCLUDE_HEADERS = BoolSetting(
    "includeHeaders", True, "a headers column (Spark's default is false)", spark="includeHeaders"
)

SPARK_SOURCE: tuple[Setting[Any], ...] = (
    SUBSCRIBE,
    SUBSCRIBE_PATTERN,
    ASSIGN,
    STARTING_OFFSETS,
    ENDING_OFFSETS,
    STARTING_TIMESTAMP,
    ENDING_TIMESTAMP,
    STARTING_BY_TIMESTAMP,
    ENDING_BY_TIMESTAMP,
    TIMESTAMP_STRATEGY,
    FAIL_ON_DATA_LOSS,
    POLL_TIMEOUT_MS,
    FETCH_OFFSET_RETRIES,
    FETCH_OFFSET_RETRY_INTERVAL,
    MAX_OFFSETS_PER_TRIGGER,
    MIN_OFFSETS_PER_TRIGGER,
    MAX_TRIGGER_DELAY,
    MIN_PARTITIONS,
    MAX_RECORDS_PER_PARTITION,
    GROUP_ID_PREFIX,
    INCLUDE_HEADERS,
)
"""The options of Spark's own Kafka source, as this source reads them (all known here, two refused)."""

SINK_TOPIC = TextSetting("topic", None, "the topic of rows without a topic column", spark="topic")
SINK_SEGMENT_BYTES = OptionalIntSetting(
    "max.message.segment.bytes",
    None,
    "the writers' chunk size, as the producer's key",
    spark="max.message.segment.bytes",
    minimum=1,
    default_doc="the producer's default",
)
SINK_REFERENCE_ABOVE = OptionalIntSetting(
    "reference.above",
    None,
    "values larger than this go by reference to reference.store (SizeThresholdPolicy(reference_above=...))",
    spark="reference.above",
    minimum=0,
)
SINK_REFERENCE_STORE = TextSetting(
    "reference.store", None, "the store referenced values go to", spark="reference.store"
)

SINK: tuple[Setting[Any], ...] = (SINK_TOPIC, SINK_SEGMENT_BYTES, SINK_REFERENCE_ABOVE, SINK_REFERENCE_STORE)
"""The sink's own options; it also takes reference.encryption, reference.compression and the store options."""
