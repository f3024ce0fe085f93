"""The keys ``HybridConsumer`` owns (LinkedIn's names and defaults where LinkedIn has them), and the
librdkafka defaults it changes; the Spark source reads the ones with a ``spark`` name as options."""

from __future__ import annotations

from typing import Any

from gateway.settings._kinds import (
    BoolSetting,
    ChoiceSetting,
    IntSetting,
    OptionalIntSetting,
    Setting,
    ValueSetting,
)
from gateway.settings.shared import (
    COMMIT_METADATA_ENCODING,
    DEFAULT_MAX_MESSAGE_BYTES,
    LOG_WARNING_INTERVAL_MS,
    REFERENCE_ENCRYPTION,
    REFERENCE_MAX_PAYLOAD_BYTES,
)

BUFFER_CAPACITY = IntSetting(
    "message.assembler.buffer.capacity",
    DEFAULT_MAX_MESSAGE_BYTES,
    "chunk bytes buffered across partitions",
    spark="message.assembler.buffer.capacity",
    java=("message.assembler.buffer.capacity",),
    minimum=1,
)
EXPIRATION_OFFSET_GAP = IntSetting(
    "message.assembler.expiration.offset.gap",
    1000,
    "drop an incomplete message this many offsets past its first segment",
    spark="message.assembler.expiration.offset.gap",
    java=("message.assembler.expiration.offset.gap",),
    minimum=0,
)
MAX_SEGMENTS = IntSetting(
    "message.assembler.max.segments.per.message",
    100_000,
    "largest segment count a message may declare",
    spark="message.assembler.max.segments.per.message",
    minimum=1,
)
MAX_MESSAGE_BYTES = OptionalIntSetting(
    "message.assembler.max.message.bytes",
    None,
    "largest size a message may declare",
    spark="message.assembler.max.message.bytes",
    minimum=1,
    default_doc="the buffer capacity",
)
MAX_TRACKED = IntSetting(
    "max.tracked.messages.per.partition",
    500,
    "delivered messages remembered for commit/seek",
    java=("max.tracked.messages.per.partition",),
    minimum=1,
)
EXCEPTION_ON_DROP = BoolSetting(
    "exception.on.message.dropped",
    True,
    "raise LargeMessageDroppedError on eviction (LinkedIn's default is false)",
    java=("exception.on.message.dropped",),
)
STALL_TIMEOUT_MS = IntSetting(
    "message.assembler.stall.timeout.ms",
    30_000,
    "how long partitions paused for room wait while nothing can be fetched",
    minimum=0,
)
ENABLE_AUTO_COMMIT = BoolSetting(
    "enable.auto.commit", True, "auto-commit run by the wrapper", java=("enable.auto.commit",)
)
AUTO_COMMIT_INTERVAL_MS = IntSetting(
    "auto.commit.interval.ms", 5000, "auto-commit interval", java=("auto.commit.interval.ms",), minimum=0
)
ENABLE_AUTO_OFFSET_STORE = BoolSetting(
    "enable.auto.offset.store", True, "false: commits without arguments commit only what store_offsets stored"
)
FETCH_BATCH_RECORDS = IntSetting("fetch.batch.records", 500, "raw records taken from librdkafka per fetch", minimum=1)
FETCH_BATCH_BYTES = IntSetting(
    "fetch.batch.bytes",
    2_000_000,
    "about how many bytes of raw records one fetch moves into the local queue",
    minimum=1,
)
CONSUME_MAX_BYTES = IntSetting(
    "consume.max.bytes",
    16_000_000,
    "bytes of whole messages one consume() call returns at most; a larger single message goes alone",
    minimum=1,
)
BAD_SEGMENTS_AS_PAYLOAD = BoolSetting(
    "treat.bad.segments.as.payload",
    False,
    "deliver a record that fails segment validation as a plain message",
    java=("treat.bad.segments.as.payload",),
)
EXCEPTION_ON_INVALID_RESET = BoolSetting(
    "exception.on.invalid.offset.reset",
    False,
    "LinkedIn's key: false accepted, true refused (it goes with liclosest)",
    java=("exception.on.invalid.offset.reset",),
)
REFERENCE_ERROR_MODE = ChoiceSetting(
    "reference.error.mode",
    "raise",
    "raise or deliver an envelope that cannot be resolved",
    choices=("raise", "deliver"),
)
FETCH_WORKERS = IntSetting(
    "reference.fetch.workers",
    4,
    "threads fetching referenced payloads ahead",
    spark="reference.fetch.workers",
    minimum=1,
)
FETCH_BUDGET_BYTES = IntSetting(
    "reference.fetch.budget.bytes",
    32_000_000,
    "payload bytes fetched ahead and not yet taken",
    spark="reference.fetch.budget.bytes",
    minimum=0,
)
STREAM_THRESHOLD_BYTES = OptionalIntSetting(
    "value.stream.threshold.bytes",
    None,
    "reference payloads at least this large are handed out as a gateway.PayloadStream, read on demand",
    minimum=1,
)
STREAM_RANGE_BYTES = IntSetting(
    "value.stream.range.bytes",
    8 * 1024 * 1024,
    "bytes a payload stream reads per store request (a sealed payload's: whole segments)",
    minimum=4096,
)
STREAM_READ_AHEAD = IntSetting(
    "value.stream.read.ahead",
    2,
    "ranges a payload stream fetches ahead of its reader",
    minimum=0,
)
TOPIC_RENAMES = ValueSetting(
    "reference.topic.renames",
    None,
    "rename formats (source.${topic}) under which a record may carry envelopes written for another topic",
    spark="reference.topic.renames",
)
ON_COMMIT = ValueSetting("on_commit", None, "confluent-kafka's commit callback, wrapped to receive the user view")
ERROR_POLICY = ChoiceSetting(
    "reference.error.policy",
    "raise",
    "what happens to a record that keeps failing to resolve",
    choices=("raise", "skip", "dead-letter"),
)
ERROR_MAX_ATTEMPTS = IntSetting("reference.error.max.attempts", 1, "attempts before the policy applies", minimum=1)
ERROR_RETRY_BACKOFF_MS = IntSetting(
    "reference.error.retry.backoff.ms", 100, "wait before retry n is n times this", minimum=0
)
DEAD_LETTER_TOPIC = ValueSetting("reference.dead.letter.topic", None, "required with dead-letter")
PEER_FORMATS = ValueSetting(
    "large.message.peer.formats",
    None,
    "read other libraries' pointer records: bakdata, kafs3, aws",
    spark="large.message.peer.formats",
    choices=("bakdata", "kafs3", "aws"),
)
PEER_BAKDATA_KEYS = BoolSetting(
    "large.message.peer.bakdata.keys",
    False,
    "also read headerless keys with bakdata's byte flag",
    spark="large.message.peer.bakdata.keys",
)
PEER_MAX_BYTES = IntSetting(
    "large.message.peer.max.bytes",
    268_435_456,
    "largest object, and decompressed payload, a peer's pointer may name",
    spark="large.message.peer.max.bytes",
    minimum=1,
)
KEY_DESERIALIZER = ValueSetting("key.deserializer", None, "a callable (bytes, ctx) -> value for keys")
VALUE_DESERIALIZER = ValueSetting("value.deserializer", None, "a callable (bytes, ctx) -> value for values")

FETCH_QUEUE_BACKOFF_MS = IntSetting(
    "fetch.queue.backoff.ms", 3, "librdkafka's key, 1000 in librdkafka: the pause of a partition whose queue is full"
)
QUEUED_MAX_KBYTES = IntSetting(
    "queued.max.messages.kbytes", 12_288, "librdkafka's key, 65 536 in librdkafka: its prefetch queue"
)
LIBRDKAFKA_DEFAULTS: tuple[IntSetting, ...] = (FETCH_QUEUE_BACKOFF_MS, QUEUED_MAX_KBYTES)
"""librdkafka's keys whose default the consumer changes (left to librdkafka, set only when unset)."""

CONSUMER: tuple[Setting[Any], ...] = (
    BUFFER_CAPACITY,
    EXPIRATION_OFFSET_GAP,
    MAX_SEGMENTS,
    MAX_MESSAGE_BYTES,
    MAX_TRACKED,
    EXCEPTION_ON_DROP,
    STALL_TIMEOUT_MS,
    ENABLE_AUTO_COMMIT,
    ENABLE_AUTO_OFFSET_STORE,
    AUTO_COMMIT_INTERVAL_MS,
    FETCH_BATCH_RECORDS,
    FETCH_BATCH_BYTES,
    CONSUME_MAX_BYTES,
    FETCH_WORKERS,
    FETCH_BUDGET_BYTES,
    STREAM_THRESHOLD_BYTES,
    STREAM_RANGE_BYTES,
    STREAM_READ_AHEAD,
    REFERENCE_MAX_PAYLOAD_BYTES,
    TOPIC_RENAMES,
    REFERENCE_ERROR_MODE,
    ERROR_POLICY,
    ERROR_MAX_ATTEMPTS,
    ERROR_RETRY_BACKOFF_MS,
    DEAD_LETTER_TOPIC,
    LOG_WARNING_INTERVAL_MS,
    COMMIT_METADATA_ENCODING,
    BAD_SEGMENTS_AS_PAYLOAD,
    ON_COMMIT,
    REFERENCE_ENCRYPTION,
    PEER_FORMATS,
    PEER_BAKDATA_KEYS,
    PEER_MAX_BYTES,
    EXCEPTION_ON_INVALID_RESET,
    KEY_DESERIALIZER,
    VALUE_DESERIALIZER,
)
"""Every key the consumer owns, in the order of docs/consumer.md §8."""
