"""Sweeping orphaned payloads: writes journalled as pending whose envelope never landed.

The producer marks every store write pending and clears the mark once Kafka acknowledged the
envelope, or deletes the payload when the send failed. A mark that outlives the grace period
therefore means the producer died between the write and the acknowledgement, or its rollback
failed, or the process died after the acknowledgement but before it cleared the mark, or the
envelope belongs to a Kafka transaction that is still open or was aborted (a transactional
producer holds its marks until the commit). Only the topic can tell these apart, so a payload is
deleted only when a *complete* read of its topic proved that no envelope points at it, or that
every envelope pointing at it was aborted. Everything else is kept, with the reason:

* the scan did not reach the end offsets it captured at its start (deadline, partition errors);
* the topic's metadata carried an error (unknown topic, authorization, leader not available);
* a record marked as an envelope did not decode and mentions the payload's id or locator;
* an envelope lies at or past its partition's last stable offset: its transaction, or one
  before it, is still open, and a ``read_committed`` read cannot tell yet whether it commits.

Telling committed from aborted takes two reads: ``read_uncommitted`` up to the high watermarks
sees every envelope and where it lies (its *sighting*); ``read_committed`` over the offsets of the
sightings returns the committed ones and silently steps over the aborted ones. An envelope the
second read stepped over is aborted; only a committed one makes a payload *landed* (its mark is
cleared), so the mark of an aborted envelope is never cleared by mistake.

Envelopes are matched by the payload's message id or its exact locator, never by store name: the
name is whatever the producer registered its store under, which the sweeper cannot know, while the
id is unique to the payload. This module sweeps the stores; the decisions are :mod:`gateway.gc.verdicts`, pure, and the
Kafka reading :mod:`gateway.gc._envelope_scan`, so the decisions test without a broker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.command import EXIT_INCOMPLETE as _EXIT_INCOMPLETE
from gateway.errors import GatewayError
from gateway.gc._envelope_scan import scan_topic, settle
from gateway.gc.progress import Progress, ProgressObserver, ignore
from gateway.gc.verdicts import Pending, Sighting, TopicScan, Verdict, Verification, judge

log = logging.getLogger(__name__)

EXIT_INCOMPLETE = _EXIT_INCOMPLETE
"""``gateway gc``'s exit status when it kept payloads for lack of proof (every code: ``gateway.command.EXIT_CODES``)."""

Verifier = Callable[[Sequence[Pending]], Mapping[Pending, Verification]]
"""Judges a batch of pending writes, typically by reading their topics once each."""


def unverified(trust_pending_marks: bool) -> Verifier:
    """A verifier that does not read Kafka: everything unknown, or absent when told to trust the marks."""
    verdict = Verdict.ABSENT if trust_pending_marks else Verdict.UNKNOWN
    reason = (
        "pending past the grace period, not checked against Kafka"
        if trust_pending_marks
        else "not checked against Kafka (no bootstrap servers given)"
    )

    batched = Verification(
        Verdict.UNKNOWN, "journalled in a batch marker, which does not show whether it was acknowledged"
    )

    def verify(batch: Sequence[Pending]) -> Mapping[Pending, Verification]:
        return {p: batched if p.batched else Verification(verdict, reason) for p in batch}

    return verify


@dataclass
class SweepReport:
    examined: int = 0
    deleted: list[str] = field(default_factory=list)
    """Proved dead (deleted, or would be on a dry run)."""
    proofs: dict[str, str] = field(default_factory=dict)
    """Why each of ``deleted`` was proved dead (no envelope, or only aborted ones)."""
    landed: list[str] = field(default_factory=list)
    """Pending marks whose envelope was found in Kafka: the mark is cleared, the payload kept."""
    kept: list[tuple[str, str]] = field(default_factory=list)
    """``(locator, why)`` for every payload neither proved live nor proved dead."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """``(locator or upload, error)`` for store operations that failed."""
    aborted: list[str] = field(default_factory=list)
    """Incomplete S3 multipart uploads older than the grace period (aborted, or would be)."""
    dry_run: bool = True

    @property
    def complete(self) -> bool:
        """Whether every examined write was decided and every operation succeeded."""
        return not self.kept and not self.failed

    def exit_code(self) -> int:
        """0 all decided and done, 1 a store operation failed, 4 something kept for lack of proof."""
        if self.failed:
            return 1
        return EXIT_INCOMPLETE if self.kept else 0


def candidates(stores: Mapping[str, Any], older_than_ms: int, report: SweepReport) -> list[Pending]:
    """Pending writes older than the cutoff, parsed; a locator that does not parse is kept and reported."""
    out: list[Pending] = []
    for name, store in stores.items():
        try:
            locators = store.list_pending(older_than_ms)
        except GatewayError as exc:
            report.failed.append((f"{name} pending journal", f"{type(exc).__name__}: {exc}"))
            continue
        for locator in locators:
            report.examined += 1
            try:
                parsed = store.validate_locator(locator)
                batched = store.journalled_in_batch(locator)
                out.append(Pending(name, locator, parsed.topic, parsed.message_id, batched))
            except (GatewayError, AttributeError) as exc:
                report.kept.append((locator, f"the locator does not parse ({exc})"))
    return out


def sweep(
    stores: Mapping[str, Any],
    *,
    grace_ms: int,
    verifier: Verifier,
    now_ms: int | None = None,
    dry_run: bool = True,
    on_progress: ProgressObserver = ignore,
) -> SweepReport:
    """Judge every write pending for longer than ``grace_ms``; delete only the proved absent.

    Also aborts multipart uploads older than the grace period in stores that have them (S3): an
    upload that old belongs to a producer that died or gave up, and S3 bills it until aborted.
    ``on_progress`` hears each pending write acted on (the verifier reports its own reading).
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now - grace_ms + 1
    report = SweepReport(dry_run=dry_run)
    batch = candidates(stores, cutoff, report)
    verdicts = verifier(batch) if batch else {}
    for done, pending in enumerate(batch):
        on_progress(Progress("sweep", "pending writes", done, len(batch), "writes"))
        verification = verdicts.get(pending, Verification(Verdict.UNKNOWN, "the verifier gave no verdict"))
        store = stores[pending.store]
        try:
            if verification.verdict is Verdict.LANDED:
                if not dry_run:
                    store.clear_pending(pending.locator)
                report.landed.append(pending.locator)
            elif verification.verdict is Verdict.ABSENT:
                if not dry_run:
                    store.delete(pending.locator)
                report.deleted.append(pending.locator)
                report.proofs[pending.locator] = verification.reason
            else:
                report.kept.append((pending.locator, verification.reason))
        except GatewayError as exc:
            log.warning("could not sweep %s from %s: %s", pending.locator, pending.store, exc)
            report.failed.append((pending.locator, f"{type(exc).__name__}: {exc}"))
    on_progress(Progress("sweep", "pending writes", len(batch), len(batch), "writes"))
    for name, store in stores.items():
        abort_stale_uploads(name, store, cutoff, dry_run=report.dry_run, aborted=report.aborted, failed=report.failed)
    return report


def abort_stale_uploads(
    name: str, store: Any, older_than_ms: int, *, dry_run: bool, aborted: list[str], failed: list[tuple[str, str]]
) -> None:
    """Abort a store's multipart uploads started before ``older_than_ms`` (stores without them are skipped).

    An upload that old belongs to a producer that died or gave up; S3 bills its parts until aborted.
    Shared by ``gc`` and ``reconcile``, which report into their own lists.
    """
    try:
        uploads = store.list_incomplete_uploads(older_than_ms)
    except GatewayError as exc:
        failed.append((f"{name} multipart uploads", f"{type(exc).__name__}: {exc}"))
        return
    for upload in uploads:
        label = f"{upload.key} (upload {upload.upload_id}, started {upload.initiated_ms})"
        try:
            if not dry_run:
                store.abort_upload(upload)
            aborted.append(label)
        except GatewayError as exc:
            failed.append((label, f"{type(exc).__name__}: {exc}"))


def verify_sightings(
    client_config: Mapping[str, Any],
    topic: str,
    sightings: Mapping[Pending, Iterable[Sighting]],
    ends: Mapping[int, int],
    *,
    timeout_s: float = 600.0,
) -> dict[Pending, Verification]:
    """gc's verdicts on writes whose envelopes a complete ``read_uncommitted`` read of ``topic`` (up to
    ``ends``) already found at ``sightings``: the ``read_committed`` read and :func:`judge` of ``gc``.

    ``gateway reconcile`` reads its topics with Spark and asks this about the envelopes it cannot
    settle alone (a missing payload, or only envelopes past a last stable offset), so that one place
    decides committed, aborted and "transaction still open" for both commands.
    """
    scan = settle(
        client_config, TopicScan.read_elsewhere(topic, sightings, ends), deadline=time.monotonic() + timeout_s
    )
    for problem in (scan.problem, scan.committed and scan.committed.problem):
        if problem:
            log.warning("topic %s: %s", topic, problem)
    return {p: judge(p, scan) for p in scan.sightings}


def kafka_verifier(
    client_config: Mapping[str, Any],
    stores: Mapping[str, Any] | None = None,
    *,
    timeout_s: float = 600.0,
    on_progress: ProgressObserver = ignore,
) -> Verifier:
    """A verifier that reads each topic named by the batch up to its end offsets, then ``read_committed``
    over the offsets of the envelopes found, to tell the committed ones from the aborted ones.

    ``timeout_s`` bounds each topic's two reads together; running out of time leaves writes unknown.
    ``stores`` is accepted for compatibility and unused: the locators already name their topics.
    ``on_progress`` hears the records read of each topic, batch by batch (``gateway gc`` shows them).
    """

    def verify(batch: Sequence[Pending]) -> Mapping[Pending, Verification]:
        by_topic: dict[str, list[Pending]] = {}
        for p in batch:
            by_topic.setdefault(p.topic, []).append(p)
        out: dict[Pending, Verification] = {}
        for topic, wanted in sorted(by_topic.items()):
            scan = scan_topic(client_config, topic, wanted, timeout_s=timeout_s, on_progress=on_progress)
            for problem in (scan.problem, scan.committed and scan.committed.problem):
                if problem:
                    log.warning("topic %s: %s", topic, problem)
            for p in wanted:
                out[p] = judge(p, scan)
        return out

    return verify
