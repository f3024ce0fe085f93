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
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from gateway.errors import GatewayError
from gateway.gc.sweeper import abort_stale_uploads
from gateway.spark.kafkaio import open_consumer, topic_partitions, watermarks
from gateway.spark.options import OptionError, parse_options
from gateway.spark.planning import offsets_to_json
from gateway.spark.reading import build_stores
from gateway.spark.source import ENVELOPE_FORMAT

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Orphan:
    store: str
    locator: str
    written_ms: int


@dataclass(frozen=True, slots=True)
class Dangling:
    store: str
    locator: str
    topic: str
    partition: int
    offset: int


@dataclass
class ReconcileReport:
    """What was found; ``deleted`` is empty unless deletion was asked for."""

    topics: tuple[str, ...]
    end_offsets: dict[str, dict[str, int]]
    envelopes: int = 0
    stored: int = 0
    orphans: list[Orphan] = field(default_factory=list)
    dangling: list[Dangling] = field(default_factory=list)
    broken: list[tuple[str, int, int, str]] = field(default_factory=list)
    """Records marked as envelopes that do not decode: ``(topic, partition, offset, error)``."""
    unchecked: int = 0
    """Envelopes naming a store, prefix or topic this run did not list, so neither verdict applies."""
    young: int = 0
    """Unreferenced objects inside the grace period: not orphans (yet)."""
    deleted: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    withheld: str | None = None
    """Why the orphans were not deleted although deletion was asked for."""
    aborted: list[str] = field(default_factory=list)
    """Incomplete S3 multipart uploads older than the grace period that were aborted."""

    @property
    def ok(self) -> bool:
        return not self.dangling and not self.broken and not self.failed and self.withheld is None

    def lines(self) -> list[str]:
        out = [
            f"topics {', '.join(self.topics)} up to {json.dumps(self.end_offsets, sort_keys=True)}",
            f"envelopes {self.envelopes}, stored objects {self.stored}: {len(self.orphans)} orphans, "
            f"{len(self.dangling)} dangling envelopes, {len(self.broken)} broken envelopes, "
            f"{self.young} unreferenced objects inside the grace period, {self.unchecked} envelopes not checked",
        ]
        out += [f"  orphan: {o.store} {o.locator} (written {_iso(o.written_ms)})" for o in self.orphans]
        out += [f"  dangling: {d.topic}[{d.partition}]@{d.offset} -> {d.store} {d.locator}" for d in self.dangling]
        out += [f"  broken: {t}[{p}]@{o}: {e}" for t, p, o, e in self.broken]
        if self.withheld is not None:
            out.append(f"  kept all {len(self.orphans)} orphans: {self.withheld}")
        out += [f"  deleted: {locator}" for locator in self.deleted]
        out += [f"  aborted upload: {label}" for label in self.aborted]
        out += [f"  failed to delete: {locator}: {error}" for locator, error in self.failed]
        return out


def reconcile(
    spark: Any,
    options: Mapping[str, str],
    *,
    grace_seconds: float = 3600.0,
    delete: bool = False,
    now_ms: int | None = None,
) -> ReconcileReport:
    """Find orphans and dangling envelopes of the topics in ``options["subscribe"]``; delete orphans if asked.

    ``options`` are ``hybrid-kafka`` options (bootstrap, ``subscribe``, the store options). The
    store listing is read on the driver, since both stores only list sequentially.
    """
    from gateway.spark import register

    register(spark)
    opts = {str(k): str(v) for k, v in options.items()}
    parsed = parse_options(opts, streaming=False)
    if not parsed.has_stores:
        raise OptionError("reconcile needs a store: redis.url, s3.bucket, gcs.bucket or azure.container")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now - int(grace_seconds * 1000)

    consumer = open_consumer(parsed)
    try:
        marks = watermarks(consumer, topic_partitions(consumer, parsed.topics), method=parsed.high_watermark_from)
    finally:
        consumer.close()
    ends = offsets_to_json({tp: high for tp, (_, high) in marks.items()})
    report = ReconcileReport(parsed.topics, ends)

    stores = build_stores(parsed)
    try:
        listed = [
            (name, locator, int(written), _message_id(store, locator))
            for name, store in stores.items()
            for topic in parsed.topics
            for locator, written in store.list_locators(topic)
        ]
        report.stored = len(listed)
        # a scan that skipped lost records would call their payloads orphans: lost data fails the job
        scan_options = {
            k: v for k, v in opts.items() if k.lower() not in ("startingoffsets", "endingoffsets", "failondataloss")
        }
        envelopes = (
            spark.read.format(ENVELOPE_FORMAT)
            .options(**scan_options)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", json.dumps(ends))
            .option("failOnDataLoss", "true")
            .load()
        )
        envelopes = envelopes.persist()
        try:
            _compare(spark, envelopes, listed, stores, parsed.topics, cutoff, report)
        finally:
            envelopes.unpersist()
        if delete:
            _delete_orphans(stores, cutoff, report)
    finally:
        for store in stores.values():
            store.close()
    return report


def _message_id(store: Any, locator: str) -> str | None:
    try:
        return str(store.validate_locator(locator).message_id)
    except (GatewayError, AttributeError):
        return None


def _delete_orphans(stores: Mapping[str, Any], cutoff: int, report: ReconcileReport) -> None:
    """Delete the orphans unless the scan leaves doubt; abort multipart uploads older than the cutoff."""
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


def _compare(
    spark: Any,
    envelopes: Any,
    listed: list[tuple[str, str, int, str | None]],
    stores: Mapping[str, Any],
    topics: tuple[str, ...],
    cutoff: int,
    report: ReconcileReport,
) -> None:
    from pyspark.sql import functions as F

    stored = spark.createDataFrame(listed, "store string, locator string, written long, messageId string")
    valid = envelopes.where(F.col("error").isNull())
    report.envelopes = envelopes.count()
    for row in envelopes.where(F.col("error").isNotNull()).collect():
        report.broken.append((row["topic"], row["partition"], row["offset"], row["error"]))
    # referenced by locator or by message id, under any store name (see the module docstring)
    by_locator = valid.select("locator").distinct()
    by_id = valid.where(F.col("messageId").isNotNull()).select("messageId").distinct()
    unreferenced = stored.join(by_locator, ["locator"], "left_anti").join(by_id, ["messageId"], "left_anti")
    for row in unreferenced.collect():
        if row["written"] < cutoff:
            report.orphans.append(Orphan(row["store"], row["locator"], row["written"]))
        else:
            report.young += 1
    missing = valid.join(stored.select("store", "locator"), ["store", "locator"], "left_anti")
    for row in missing.collect():
        if _listed_here(stores, topics, row["store"], row["locator"]):
            report.dangling.append(
                Dangling(row["store"], row["locator"], row["topic"], row["partition"], row["offset"])
            )
        else:
            report.unchecked += 1
    report.orphans.sort(key=lambda o: (o.store, o.locator))
    report.dangling.sort(key=lambda d: (d.topic, d.partition, d.offset))


def _listed_here(stores: Mapping[str, Any], topics: tuple[str, ...], name: str, locator: str) -> bool:
    """Whether the listing taken covers this locator, so its absence there means the payload is gone."""
    store = stores.get(name)
    if store is None:
        return False
    try:
        parsed = store.validate_locator(locator)
    except GatewayError:
        return False
    return getattr(parsed, "topic", None) in topics


def _iso(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC: what an operator reads and what other tools parse."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
