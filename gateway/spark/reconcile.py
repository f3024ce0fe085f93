"""Reconcile a topic's envelopes with its payload store, as a Spark job.

``gateway gc`` handles the crash the producer journals (a write still marked pending). What it
cannot see is drift that happens later: a payload deleted by hand or by a too-short TTL while
its envelope is still in Kafka (a *dangling* envelope, which every reader will fail on), or a
payload whose envelope is gone, was never journalled, or outlived the topic's retention (an
*orphan*, which only costs money). Finding either means joining every envelope in the topic
against every object in the store, which is what Spark is for: the topic is scanned in parallel
by the ``hybrid-kafka-envelopes`` source, the store's listing becomes a DataFrame, and two
anti-joins give the answer.

Order matters for correctness. The topic's end offsets are fixed first, then the store is
listed: a payload is always written before its envelope is acknowledged, so any envelope below
those end offsets has its payload in the listing unless it really is missing. The other way
round, a payload written after the offsets were fixed may have its envelope beyond them; the
grace period (objects younger than ``now - grace`` are never called orphans) covers that and
producers still retrying their envelope.

The scan proves before anything is deleted, as ``gateway gc`` does (issue 39):

* It reads ``read_uncommitted`` up to the high watermarks. A ``read_committed`` scan stops at the
  last stable offset, so the envelopes of a transaction still open, and every record after it,
  were not seen and their payloads were deleted as orphans; they commit later, dangling.
* An object that only envelopes at or past a last stable offset point at, and an envelope whose
  payload is missing, are handed to gc's own proof (:func:`gateway.gc.sweeper.verify_sightings`:
  ``read_committed`` over those offsets, then gc's verdict). Committed: live, or dangling.
  Aborted: what an abort leaves behind, not dangling. Still open: kept and reported as undecided,
  exit status 4 as gc's.
* Copies of the topics count: ``reference.topic.renames`` (the consumer's key) names the mirrors
  of each topic (``source.${topic}``), and those found in the cluster are scanned too. A mirror is
  also covered when named as one more topic.
* The store's whole prefix is listed. Objects written for a topic not reconciled mean the prefix is
  shared with topics whose envelopes were not read; a copy of an envelope there (a mirror not
  named) would point at an "orphan". ``delete`` then deletes nothing and the report names those
  topics (exit status 5): name them too, or give them their own prefix.

An object counts as referenced when any envelope carries its locator or its message id, whatever
store name the envelope uses: the name is the producer's choice and need not match the one this
job was given, and deleting on a name mismatch would delete live payloads. Orphans are deleted only
when asked and only when nothing casts doubt on the scan: records marked as envelopes that do not
decode may point at any of them, so their presence keeps every orphan (the report says why).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gateway.errors import GatewayError
from gateway.gc.sweeper import abort_stale_uploads, verify_sightings
from gateway.gc.verdicts import Pending, Sighting, Verdict, Verification
from gateway.protocol.records import TopicPartitionKey
from gateway.spark._reconcile_report import (
    EXIT_SHARED_PREFIX,
    Dangling,
    Orphan,
    ReconcileReport,
    Undecided,
)
from gateway.spark.offset_ranges import open_consumer, topic_partitions, watermarks
from gateway.spark.options import OptionError, SourceOptions, parse_options
from gateway.spark.planning import offsets_to_json
from gateway.spark.reading import build_stores
from gateway.spark.source import ENVELOPE_FORMAT
from gateway.store import Store

log = logging.getLogger(__name__)

_METADATA_TIMEOUT = 30.0
_SCAN_OPTIONS_SET_HERE = (
    "startingoffsets",
    "endingoffsets",
    "failondataloss",
    "subscribe",
    "subscribepattern",
    "assign",
    "kafka.isolation.level",
)


def reconcile(
    spark: Any,
    options: Mapping[str, str],
    *,
    grace_seconds: float = 3600.0,
    delete: bool = False,
    now_ms: int | None = None,
    settle_timeout_s: float = 600.0,
) -> ReconcileReport:
    """Find orphans and dangling envelopes of the topics in ``options["subscribe"]``; delete orphans if asked.

    ``options`` are ``hybrid-kafka`` options (bootstrap, ``subscribe``, the store options, and
    ``reference.topic.renames`` for mirrors). The store listing is read on the driver, since the
    stores only list sequentially. ``settle_timeout_s`` bounds each topic's ``read_committed`` read
    of gc's proof; what it does not reach stays undecided.
    """
    from gateway.spark import register

    register(spark)
    opts = {str(k): str(v) for k, v in options.items()}
    parsed = parse_options(opts, streaming=False)
    if not parsed.has_stores:
        raise OptionError("reconcile needs a store: redis.url, s3.bucket, gcs.bucket or azure.container")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now - int(grace_seconds * 1000)

    mirrors, ends, stable = _fix_offsets(parsed)
    scanned = (*parsed.topics, *mirrors)
    report = ReconcileReport(parsed.topics, offsets_to_json(ends), mirrors)
    report.stable_offsets = offsets_to_json({tp: lso for tp, lso in stable.items() if lso < ends[tp]})

    stores = build_stores(parsed)
    try:
        listed = _listing(stores, frozenset(scanned), report)
        scan_options = {k: v for k, v in opts.items() if k.lower() not in _SCAN_OPTIONS_SET_HERE}
        envelopes = (
            spark.read.format(ENVELOPE_FORMAT)
            .options(**scan_options)
            .option("subscribe", ",".join(scanned))
            .option("kafka.isolation.level", "read_uncommitted")  # up to the high watermark, open transactions too
            .option("startingOffsets", "earliest")
            .option("endingOffsets", _json_offsets(ends))
            # a scan that skipped lost records would call their payloads orphans: lost data fails the job
            .option("failOnDataLoss", "true")
            .load()
        )
        envelopes = envelopes.persist()
        try:
            tail_refs, missing = _compare(spark, envelopes, listed, stable, cutoff, report)
        finally:
            envelopes.unpersist()
        settle = _Settle(parsed, ends, settle_timeout_s)
        _judge_tail_refs(tail_refs, cutoff, settle, report)
        _judge_missing(missing, stores, settle, report)
        if delete:
            _delete_orphans(stores, cutoff, report)
    finally:
        for store in stores.values():
            store.close()
    return report


def _json_offsets(offsets: Mapping[TopicPartitionKey, int]) -> str:
    return json.dumps(offsets_to_json(dict(offsets)))


def _fix_offsets(
    parsed: SourceOptions,
) -> tuple[tuple[str, ...], dict[TopicPartitionKey, int], dict[TopicPartitionKey, int]]:
    """The mirrors to scan too, then per partition the last stable offset and the high watermark, in that
    order: every offset below the first is settled (committed or aborted) and below the second."""
    method = parsed.high_watermark_from
    consumer = open_consumer(_isolated(parsed, "read_committed"))
    try:
        mirrors = _mirrors(consumer, parsed)
        partitions = topic_partitions(consumer, (*parsed.topics, *mirrors))
        stable = {tp: high for tp, (_, high) in watermarks(consumer, partitions, method=method).items()}
    finally:
        consumer.close()
    consumer = open_consumer(_isolated(parsed, "read_uncommitted"))
    try:
        ends = {tp: high for tp, (_, high) in watermarks(consumer, partitions, method=method).items()}
    finally:
        consumer.close()
    return mirrors, ends, stable


def _isolated(parsed: SourceOptions, isolation: str) -> SourceOptions:
    """A ``read_committed`` consumer's high watermark is the last stable offset; a ``read_uncommitted``
    one's is the log's end."""
    return replace(parsed, kafka_config={**parsed.kafka_config, "isolation.level": isolation})


def _mirrors(consumer: Any, parsed: SourceOptions) -> tuple[str, ...]:
    """The cluster's topics that ``reference.topic.renames`` makes copies of a topic reconciled, as a
    consumer would read them (:meth:`ReferenceRules.sources`: ``dr.source.A`` copies ``source.A`` and ``A``)."""
    rules = parsed.reference_rules
    if not rules.renames:
        return ()
    told = set(parsed.topics)
    names = consumer.list_topics(timeout=_METADATA_TIMEOUT).topics
    return tuple(sorted(t for t in names if t not in told and not t.startswith("__") and rules.sources(t) & told))


def _listing(
    stores: Mapping[str, Store], scanned: frozenset[str], report: ReconcileReport
) -> list[tuple[str, str, int, str | None, bool]]:
    """Every object under each store's prefix: ``(store, locator, written, message id, candidate)``.

    Only objects written for a scanned topic are candidates for orphans; the others are still listed,
    since an envelope pointing at one is not dangling, and are counted by topic in ``report.foreign``.
    """
    listed: list[tuple[str, str, int, str | None, bool]] = []
    for name, store in stores.items():
        for locator, written in store.list_locators():
            topic, message_id = _written_for(store, locator)
            candidate = topic in scanned
            if not candidate:
                label = topic if topic is not None else "(locators naming no topic)"
                report.foreign[label] = report.foreign.get(label, 0) + 1
            listed.append((name, locator, int(written), message_id, candidate))
    report.stored = sum(1 for row in listed if row[4])
    return listed


def _written_for(store: Store, locator: str) -> tuple[str | None, str | None]:
    """The topic and message id a locator names, ``(None, None)`` when it does not parse or names none."""
    try:
        address = store.address_of(locator)
    except GatewayError:
        return None, None
    return (None, None) if address is None else (address.topic, str(address.message_id))


def _compare(
    spark: Any,
    envelopes: Any,
    listed: list[tuple[str, str, int, str | None, bool]],
    stable: Mapping[TopicPartitionKey, int],
    cutoff: int,
    report: ReconcileReport,
) -> tuple[list[Any], list[Any]]:
    """Orphans and the counts into ``report``; returns what needs gc's proof: the objects only envelopes at
    or past a last stable offset point at (with where those lie), and the envelopes whose payload is missing."""
    from pyspark.sql import functions as F

    stored = spark.createDataFrame(
        listed, "store string, locator string, written long, messageId string, candidate boolean"
    )
    report.envelopes = envelopes.count()
    for row in envelopes.where(F.col("error").isNotNull()).collect():
        report.broken.append((row["topic"], row["partition"], row["offset"], row["error"]))
    marks = spark.createDataFrame(
        [(t, p, lso) for (t, p), lso in stable.items()], "topic string, partition int, stable long"
    )
    # referenced by locator or by message id, under any store name (see the module docstring)
    valid = envelopes.where(F.col("error").isNull()).join(marks, ["topic", "partition"], "left")
    tail = F.col("stable").isNull() | (F.col("offset") >= F.col("stable"))
    settled, open_ = valid.where(~tail), valid.where(tail)
    candidates = _unreferenced(stored.where(F.col("candidate")).drop("candidate"), settled)
    positions = [F.col("topic").alias("envelopeTopic"), "partition", "offset"]
    tail_refs = candidates.join(open_.select(*positions, "locator"), ["locator"]).unionByName(
        candidates.join(open_.where(F.col("messageId").isNotNull()).select(*positions, "messageId"), ["messageId"])
    )
    for row in _unreferenced(candidates, open_).collect():
        if row["written"] < cutoff:
            report.orphans.append(Orphan(row["store"], row["locator"], row["written"]))
        else:
            report.young += 1
    report.orphans.sort(key=lambda o: (o.store, o.locator))
    missing = valid.join(stored.select("store", "locator"), ["store", "locator"], "left_anti")
    return tail_refs.collect(), missing.collect()


def _unreferenced(stored: Any, envelopes: Any) -> Any:
    """The rows of ``stored`` no row of ``envelopes`` points at, by locator or by message id."""
    from pyspark.sql import functions as F

    by_locator = envelopes.select("locator").distinct()
    by_id = envelopes.where(F.col("messageId").isNotNull()).select("messageId").distinct()
    return stored.join(by_locator, ["locator"], "left_anti").join(by_id, ["messageId"], "left_anti")


class _Settle:
    """gc's proof for sightings the scan could not settle, per topic of the envelopes."""

    def __init__(self, parsed: SourceOptions, ends: Mapping[TopicPartitionKey, int], timeout_s: float) -> None:
        self._config = {
            "bootstrap.servers": parsed.bootstrap_servers,
            **parsed.kafka_config,
            "logger": logging.getLogger("gateway.kafka"),
        }
        self._ends = ends
        self._timeout_s = timeout_s

    def __call__(
        self, sightings: Mapping[tuple[str, Pending], set[Sighting]]
    ) -> dict[tuple[str, Pending], Verification]:
        by_topic: dict[str, dict[Pending, set[Sighting]]] = {}
        for (topic, pending), where in sightings.items():
            by_topic.setdefault(topic, {})[pending] = where
        out: dict[tuple[str, Pending], Verification] = {}
        for topic, wanted in sorted(by_topic.items()):
            ends = {p: end for (t, p), end in self._ends.items() if t == topic}
            verdicts = verify_sightings(self._config, topic, wanted, ends, timeout_s=self._timeout_s)
            out.update({(topic, p): v for p, v in verdicts.items()})
        return out


def _judge_tail_refs(rows: Iterable[Any], cutoff: int, settle: _Settle, report: ReconcileReport) -> None:
    """Objects only envelopes at or past a last stable offset point at: live once a committed one is
    found, undecided while the transaction is open (gc's reason), young inside the grace period."""
    objects: dict[tuple[str, str], Pending] = {}
    sightings: dict[tuple[str, Pending], set[Sighting]] = {}
    young: set[tuple[str, str]] = set()
    for row in rows:
        key = (row["store"], row["locator"])
        if row["written"] >= cutoff:
            young.add(key)
            continue
        pending = objects.setdefault(key, _pending(row["store"], row["locator"], row["messageId"]))
        sightings.setdefault((row["envelopeTopic"], pending), set()).add((row["partition"], row["offset"]))
    report.young += len(young)
    verdicts: dict[Pending, list[Verification]] = {}
    for (_, pending), verification in settle(sightings).items():
        verdicts.setdefault(pending, []).append(verification)
    for key, pending in sorted(objects.items()):
        found = verdicts.get(pending, [])
        if any(v.verdict is Verdict.LANDED for v in found):
            continue
        unknown = [v.reason for v in found if v.verdict is Verdict.UNKNOWN]
        if unknown:
            report.undecided.append(Undecided(key[0], key[1], unknown[0]))


def _judge_missing(rows: Iterable[Any], stores: Mapping[str, Any], settle: _Settle, report: ReconcileReport) -> None:
    """Envelopes whose payload the listing lacks: dangling when committed, nothing when aborted, undecided
    while their transaction is open; an envelope naming a store or prefix not listed is not checked."""
    sightings: dict[tuple[str, Pending], set[Sighting]] = {}
    for row in rows:
        if not _listed_here(stores, row["store"], row["locator"]):
            report.unchecked += 1
            continue
        pending = _pending(row["store"], row["locator"], row["messageId"])
        sightings.setdefault((row["topic"], pending), set()).add((row["partition"], row["offset"]))
    for (topic, pending), verification in settle(sightings).items():
        if verification.verdict is Verdict.LANDED:
            for partition, offset in sorted(sightings[(topic, pending)]):
                report.dangling.append(Dangling(pending.store, pending.locator, topic, partition, offset))
        elif verification.verdict is Verdict.ABSENT:
            report.aborted_envelopes += len(sightings[(topic, pending)])
        else:
            report.undecided.append(Undecided(pending.store, pending.locator, verification.reason))
    report.dangling.sort(key=lambda d: (d.topic, d.partition, d.offset))
    report.undecided.sort(key=lambda u: (u.store, u.locator))


def _pending(store: str, locator: str, message_id: str | None) -> Pending:
    """gc's key for a write; the topic is the envelope's business here (``verify_sightings`` takes it)."""
    return Pending(store, locator, "", uuid.UUID(message_id) if message_id else uuid.UUID(int=0))


def _listed_here(stores: Mapping[str, Any], name: str, locator: str) -> bool:
    """Whether the listing taken (the store's whole prefix) covers this locator, so that its absence
    there means the payload is gone."""
    store = stores.get(name)
    if store is None:
        return False
    try:
        store.validate_locator(locator)
    except GatewayError:
        return False
    return True


def _delete_orphans(stores: Mapping[str, Any], cutoff: int, report: ReconcileReport) -> None:
    """Delete the orphans unless the scan leaves doubt; abort multipart uploads older than the cutoff."""
    if report.foreign:
        named = ", ".join(f"{topic} ({count} objects)" for topic, count in sorted(report.foreign.items()))
        report.withheld = (
            f"--delete refused: the prefix is shared with topics not reconciled: {named}; their envelopes, "
            "or copies of them, may point at these objects: reconcile them together (more topics, or "
            "reference.topic.renames for mirrors) or give them their own prefix"
        )
        report.refused = True
        return
    if report.broken and report.orphans:
        report.withheld = (
            f"{len(report.broken)} records marked as envelopes do not decode and may point at "
            "them; fix or remove those records, then run again"
        )
    else:
        for orphan in report.orphans:
            try:
                stores[orphan.store].delete(orphan.locator)
                report.deleted.append(orphan.locator)
            except GatewayError as exc:
                report.failed.append((orphan.locator, f"{type(exc).__name__}: {exc}"))
    for name, store in stores.items():
        abort_stale_uploads(name, store, cutoff, dry_run=False, aborted=report.aborted, failed=report.failed)


__all__ = ["EXIT_SHARED_PREFIX", "Dangling", "Orphan", "ReconcileReport", "Undecided", "reconcile"]
