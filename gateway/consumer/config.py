"""The keys :class:`~gateway.consumer._hybrid_consumer.HybridConsumer` owns, parsed once; the rest go to librdkafka.

Keys it owns (LinkedIn's names and defaults where LinkedIn has them):

* ``message.assembler.buffer.capacity`` (32 000 000): chunk bytes buffered across partitions;
* ``message.assembler.expiration.offset.gap`` (1000): drop an incomplete message once the
  partition has moved this many offsets past its first segment;
* ``message.assembler.max.segments.per.message`` (100 000) and
  ``message.assembler.max.message.bytes`` (the buffer capacity): what one message may declare;
* ``max.tracked.messages.per.partition`` (500): delivered messages remembered for commit/seek;
* ``exception.on.message.dropped`` (true here; LinkedIn's default is false): raise
  :class:`LargeMessageDroppedError` on eviction; false is LinkedIn's silent behaviour (counted in
  ``dropped.evicted`` and logged). Either way commits of the partition stay at the dropped
  message's first segment, so a restart reads it again. With the buffer full the consumer first
  pauses the partitions not needed to finish the oldest incomplete message
  (:mod:`gateway.core.flow`): eviction is left for what cannot be finished within the capacity;
* ``message.assembler.stall.timeout.ms`` (30 000): how long partitions paused for room wait while
  nothing at all can be fetched (the message they wait for is incomplete at the end of its
  partition) before that message is given up as a drop;
* ``enable.auto.commit`` (true) and ``auto.commit.interval.ms`` (5000): run by this wrapper,
  committing safe offsets; the inner consumer's own auto-commit is always off;
* ``enable.auto.offset.store`` (true): false makes commits without arguments (and auto-commits)
  commit only what ``store_offsets`` stored, as in librdkafka, translated to safe offsets;
* ``fetch.batch.records`` (500): raw records taken from librdkafka per fetch, fewer when they are
  large: ``fetch.batch.bytes`` (2 000 000) bounds a fetch by the size of its first record, so the
  local queue never holds more than a few large segments beside librdkafka's own queue (a larger
  bound let a reader's peak memory swing by about a message from pass to pass, at no gain in read
  rate);
* librdkafka's ``fetch.queue.backoff.ms`` defaults to 3 here (librdkafka's own default is 1000):
  a consumer that assembles a large message lets librdkafka's queue reach its thresholds, and a
  pause of a second per partition then starves the chunked route of the segments it needs, and
  even 10 ms slows it. The pause only applies while the queue is full: librdkafka then looks at
  each partition's queue again every 3 ms;
* librdkafka's ``queued.max.messages.kbytes`` defaults to 12 288 here (librdkafka's own is 65 536):
  this consumer holds the message it assembles (and referenced payloads fetched ahead, within
  ``reference.fetch.budget.bytes``) itself, so librdkafka's 64 MiB of prefetch beside it would hold
  several more large messages while the application works on one; 12 MiB keeps the read rate of
  the larger queue with the 3 ms backoff, which a smaller queue loses. The measurements behind
  these three defaults are in docs/consumer.md (§1, "The raw-record queue");
* ``reference.fetch.workers`` (4) and ``reference.fetch.budget.bytes`` (32 000 000): parallel
  fetch-ahead of referenced payloads across the fetched batch;
* ``reference.max.payload.bytes`` (2 000 000 000) and ``reference.topic.renames`` (none): an
  envelope declaring a larger payload, or pointing at a payload written for another topic than its
  record's (unless its record's topic is a copy of that one under one of these rename formats), is
  refused before any store is asked (see :mod:`gateway.consumer.reference_rules`);
* ``reference.error.mode`` (``raise``): an envelope that cannot be resolved raises its typed
  error (carrying the record in ``kafka_message``); ``deliver`` returns the record with
  ``error()`` set instead. Either way the loop goes on, and commits stop at that record until
  the application commits it explicitly (``commit(message=...)``);
* ``reference.error.policy`` (``raise``; or ``skip``, ``dead-letter``),
  ``reference.error.max.attempts`` (1), ``reference.error.retry.backoff.ms`` (100) and
  ``reference.dead.letter.topic``: what happens to a record that keeps failing to resolve
  (see :mod:`gateway.consumer._errors`);
* ``commit.metadata.encoding`` (``nul-terminated``; or ``java``): how the ``"<HW>,<metadata>"`` of
  every commit goes on the wire (see :class:`~gateway.protocol.metadata.CommitEncoding` and
  docs/protocol.md §7);
* ``log.warning.interval.ms`` (10 000): at most one warning line of a kind (dropped messages,
  skipped records) per interval; the others are counted in ``warnings.suppressed``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.consumer._errors import ErrorPolicy, UnresolvedSettings
from gateway.consumer.peer_payloads import DEFAULT_PEER_MAX_BYTES
from gateway.consumer.reference_rules import (
    DEFAULT_RULES,
    ReferenceRules,
    parse_topic_renames,
)
from gateway.consumer.resolver import Resolver
from gateway.core.assembler import MessageAssembler
from gateway.core.offsets import DeliveredOffsetTracker
from gateway.core.pipeline import ConsumerPipeline
from gateway.core.streams.plan import OFF as STREAMS_OFF
from gateway.core.streams.plan import StreamSettings
from gateway.encryption import ReferenceEncryption
from gateway.errors import ConfigurationError
from gateway.librdkafka.group_offsets import pop_commit_encoding
from gateway.protocol.metadata import CommitEncoding
from gateway.protocol.peers import PeerFormat, PeerReader, parse_peer_formats
from gateway.settings import LIBRDKAFKA_DEFAULTS
from gateway.settings import consumer as keys
from gateway.settings.shared import LOG_WARNING_INTERVAL_MS, REFERENCE_MAX_PAYLOAD_BYTES
from gateway.store import Store

FETCH_QUEUE_BACKOFF_MS = keys.FETCH_QUEUE_BACKOFF_MS.default
"""librdkafka's ``fetch.queue.backoff.ms`` unless the configuration sets it (see the module docstring)."""
QUEUED_MAX_KBYTES = keys.QUEUED_MAX_KBYTES.default
"""librdkafka's ``queued.max.messages.kbytes`` unless the configuration sets it (see the module docstring)."""
FETCH_BATCH_BYTES = keys.FETCH_BATCH_BYTES.default
"""``fetch.batch.bytes``: about how many bytes of raw records one fetch moves into the local queue."""


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    capacity: int
    expiration_offset_gap: int
    max_segments: int
    max_message_bytes: int
    max_tracked: int
    raise_on_drop: bool
    auto_commit: bool
    auto_commit_s: float
    auto_offset_store: bool
    batch: int
    batch_bytes: int
    deliver_errors: bool
    workers: int
    budget: int
    on_commit: Callable[..., Any] | None
    unresolved: UnresolvedSettings
    warning_interval_s: float
    bad_segments_as_payload: bool = False
    stall_timeout_s: float = 30.0
    peers: PeerReader | None = None
    peer_max_bytes: int = DEFAULT_PEER_MAX_BYTES
    reference_rules: ReferenceRules = DEFAULT_RULES
    commit_encoding: CommitEncoding = CommitEncoding.NUL_TERMINATED
    streams: StreamSettings = STREAMS_OFF
    consume_max_bytes: int = keys.CONSUME_MAX_BYTES.default

    def resolver(self, stores: Mapping[str, Store], encryption: ReferenceEncryption | None = None) -> Resolver:
        """The payload fetcher these settings describe, over ``stores``; ``encryption`` opens sealed payloads."""
        return Resolver(
            stores,
            workers=self.workers,
            budget=self.budget,
            peer_max_bytes=self.peer_max_bytes,
            rules=self.reference_rules,
            encryption=encryption,
            streams=self.streams,
        )

    def pipeline(self, *, awaits_commits: bool = False, pauses: bool = False) -> ConsumerPipeline:
        """The pipeline these settings describe; a group consumer's asks for each partition's commit.

        ``pauses``: the driver pauses partitions for room instead of evicting, and keeps commits
        at what was dropped (:mod:`gateway.core.flow`)."""
        return ConsumerPipeline(
            MessageAssembler(
                self.capacity,
                self.expiration_offset_gap,
                exception_on_message_dropped=self.raise_on_drop,
                max_segments=self.max_segments,
                max_message_bytes=self.max_message_bytes,
                wait_for_room=pauses,
            ),
            DeliveredOffsetTracker(self.max_tracked),
            bad_segments_as_payload=self.bad_segments_as_payload,
            peers=self.peers,
            awaits_commits=awaits_commits,
            hold_drops=pauses,
            stall_timeout_s=self.stall_timeout_s,
        )


def parse_consumer_config(config: Mapping[str, Any]) -> tuple[ConsumerSettings, dict[str, Any]]:
    """Our settings, and the configuration for librdkafka with our keys removed (its auto-commit off).

    The keys are taken in one fixed order, so that of several bad ones the same is reported first.
    """
    conf = dict(config)
    assembly = _assembly_keys(conf)
    stall_timeout_s = keys.STALL_TIMEOUT_MS.pop(conf) / 1000.0
    reading = _reading_keys(conf)
    consume_max_bytes = keys.CONSUME_MAX_BYTES.pop(conf)
    for librdkafka_key in LIBRDKAFKA_DEFAULTS:
        conf.setdefault(librdkafka_key.key, librdkafka_key.default)
    bad_as_payload = keys.BAD_SEGMENTS_AS_PAYLOAD.pop(conf)
    _linkedin_resets(conf)
    error_mode = keys.REFERENCE_ERROR_MODE.pop(conf)
    workers = keys.FETCH_WORKERS.pop(conf)
    budget = keys.FETCH_BUDGET_BYTES.pop(conf)
    streams = StreamSettings(
        keys.STREAM_THRESHOLD_BYTES.pop(conf), keys.STREAM_RANGE_BYTES.pop(conf), keys.STREAM_READ_AHEAD.pop(conf)
    )
    rules = reference_rules(conf)
    on_commit = keys.ON_COMMIT.pop(conf)
    unresolved = _unresolved_settings(conf)
    warning_interval_s = LOG_WARNING_INTERVAL_MS.pop(conf) / 1000.0
    peers = peer_reader(conf)
    peer_max_bytes = keys.PEER_MAX_BYTES.pop(conf)
    commit_encoding = pop_commit_encoding(conf)
    conf["enable.auto.commit"] = False
    settings = ConsumerSettings(  # by name: most of them are numbers, and a swapped pair would pass unseen
        **assembly,
        **reading,
        deliver_errors=error_mode == "deliver",
        workers=workers,
        budget=budget,
        on_commit=on_commit,
        unresolved=unresolved,
        warning_interval_s=warning_interval_s,
        bad_segments_as_payload=bad_as_payload,
        stall_timeout_s=stall_timeout_s,
        peers=peers,
        peer_max_bytes=peer_max_bytes,
        reference_rules=rules,
        commit_encoding=commit_encoding,
        streams=streams,
        consume_max_bytes=consume_max_bytes,
    )
    return settings, conf


def _assembly_keys(conf: dict[str, Any]) -> dict[str, Any]:
    """The assembler's bounds popped from ``conf``, by their :class:`ConsumerSettings` field names."""
    capacity = keys.BUFFER_CAPACITY.pop(conf)
    gap = keys.EXPIRATION_OFFSET_GAP.pop(conf)
    max_segments = keys.MAX_SEGMENTS.pop(conf)
    declared_max = keys.MAX_MESSAGE_BYTES.pop(conf)
    return {
        "capacity": capacity,
        "expiration_offset_gap": gap,
        "max_segments": max_segments,
        "max_message_bytes": capacity if declared_max is None else declared_max,  # one message may fill the buffer
        "max_tracked": keys.MAX_TRACKED.pop(conf),
        "raise_on_drop": keys.EXCEPTION_ON_DROP.pop(conf),
    }


def _reading_keys(conf: dict[str, Any]) -> dict[str, Any]:
    """Commits and fetches popped from ``conf``, by their :class:`ConsumerSettings` field names."""
    return {
        "auto_commit": keys.ENABLE_AUTO_COMMIT.pop(conf),
        "auto_commit_s": keys.AUTO_COMMIT_INTERVAL_MS.pop(conf) / 1000.0,
        "auto_offset_store": keys.ENABLE_AUTO_OFFSET_STORE.pop(conf),
        "batch": keys.FETCH_BATCH_RECORDS.pop(conf),
        "batch_bytes": keys.FETCH_BATCH_BYTES.pop(conf),
    }


def reference_rules(conf: dict[str, Any]) -> ReferenceRules:
    """``reference.max.payload.bytes`` and ``reference.topic.renames`` popped from ``conf``."""
    max_payload = REFERENCE_MAX_PAYLOAD_BYTES.pop(conf)
    return ReferenceRules(max_payload, parse_topic_renames(keys.TOPIC_RENAMES.pop(conf)))


def peer_reader(conf: dict[str, Any]) -> PeerReader | None:
    """``large.message.peer.formats`` (and ``.bakdata.keys``) popped from ``conf``; ``None`` when no format is on."""
    formats = parse_peer_formats(keys.PEER_FORMATS.pop(conf))
    bakdata_keys = keys.PEER_BAKDATA_KEYS.pop(conf)
    if bakdata_keys and PeerFormat.BAKDATA not in formats:
        raise ConfigurationError("large.message.peer.bakdata.keys needs 'bakdata' in large.message.peer.formats")
    return PeerReader(formats, bakdata_keys) if formats else None


def _linkedin_resets(conf: dict[str, Any]) -> None:
    """LinkedIn's reset keys: what librdkafka can do is accepted, ``liclosest`` is refused with the way out."""
    if str(conf.get("auto.offset.reset", "")).lower() == "liclosest":
        raise ValueError(
            "auto.offset.reset=liclosest is LiKafkaConsumer's own policy (nearest end of the log); librdkafka"
            " resets to one end only: use earliest (also what liclosest does without a committed offset) or"
            " latest, or error to handle out-of-range offsets in the application"
        )
    if keys.EXCEPTION_ON_INVALID_RESET.pop(conf):
        raise ValueError(
            "exception.on.invalid.offset.reset=true goes with liclosest; use auto.offset.reset=error, which"
            " reports an invalid offset as an error event"
        )


def _unresolved_settings(conf: dict[str, Any]) -> UnresolvedSettings:
    policy = ErrorPolicy(keys.ERROR_POLICY.pop(conf))
    attempts = keys.ERROR_MAX_ATTEMPTS.pop(conf)
    backoff_s = keys.ERROR_RETRY_BACKOFF_MS.pop(conf) / 1000.0
    topic = keys.DEAD_LETTER_TOPIC.pop(conf)
    return UnresolvedSettings(policy, attempts, backoff_s, None if topic is None else str(topic))
