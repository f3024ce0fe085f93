"""What ``reconcile`` found and did, and the exit status it makes: :mod:`gateway.spark.reconcile` fills it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

from gateway.command import EXIT_FAILED, EXIT_REFUSED
from gateway.gc.sweeper import EXIT_INCOMPLETE

EXIT_SHARED_PREFIX = EXIT_REFUSED  # the CLI's one table of exit codes (gateway.command) owns the number
"""``gateway reconcile --delete`` deleted nothing: the store's prefix also holds objects of topics it was not
told about, whose envelopes (or their mirrors) it did not read, so no orphan was proved unreferenced."""


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


@dataclass(frozen=True, slots=True)
class Undecided:
    """An object or envelope neither proved live nor proved dead, kept with ``gateway gc``'s reason."""

    store: str
    locator: str
    reason: str


@dataclass
class ReconcileReport:
    """What was found; ``deleted`` is empty unless deletion was asked for."""

    topics: tuple[str, ...]
    end_offsets: dict[str, dict[str, int]]
    """The high watermarks the scan read up to (``read_uncommitted``: open transactions included)."""
    mirrors: tuple[str, ...] = ()
    """Topics ``reference.topic.renames`` names as copies of ``topics``, scanned with them."""
    stable_offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    """Last stable offsets below the high watermark: a transaction open there (or records after one)."""
    envelopes: int = 0
    stored: int = 0
    orphans: list[Orphan] = field(default_factory=list)
    dangling: list[Dangling] = field(default_factory=list)
    broken: list[tuple[str, int, int, str]] = field(default_factory=list)
    """Records marked as envelopes that do not decode: ``(topic, partition, offset, error)``."""
    unchecked: int = 0
    """Envelopes naming a store or prefix this run did not list, so neither verdict applies."""
    young: int = 0
    """Unreferenced objects, or objects only an open transaction refers to, inside the grace period."""
    undecided: list[Undecided] = field(default_factory=list)
    """Kept for lack of proof (gc's exit status 4): an envelope of a transaction still open points at it."""
    aborted_envelopes: int = 0
    """Envelopes of aborted transactions whose payload is gone: what an abort leaves, not dangling."""
    foreign: dict[str, int] = field(default_factory=dict)
    """Objects in the listed prefixes written for topics not reconciled, by topic (named in the report
    only when they make ``delete`` refuse: a dry run's report stays about the topics reconciled)."""
    deleted: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    withheld: str | None = None
    """Why the orphans were not deleted although deletion was asked for."""
    refused: bool = False
    """``withheld`` because of :attr:`foreign` (exit :data:`EXIT_SHARED_PREFIX`)."""
    aborted: list[str] = field(default_factory=list)
    """Incomplete S3 multipart uploads older than the grace period that were aborted."""

    def exit_code(self) -> int:
        """1 dangling or broken envelopes or a failed deletion, 5 ``--delete`` refused (shared prefix),
        4 something kept for lack of proof (as ``gateway gc``), else 0."""
        if self.dangling or self.broken or self.failed or (self.withheld is not None and not self.refused):
            return EXIT_FAILED
        if self.refused:
            return EXIT_SHARED_PREFIX
        return EXIT_INCOMPLETE if self.undecided else 0

    @property
    def ok(self) -> bool:
        return self.exit_code() == 0

    def lines(self) -> list[str]:
        out = [
            f"topics {', '.join(self.topics)} up to {json.dumps(self.end_offsets, sort_keys=True)}",
            f"envelopes {self.envelopes}, stored objects {self.stored}: {len(self.orphans)} orphans, "
            f"{len(self.dangling)} dangling envelopes, {len(self.broken)} broken envelopes, "
            f"{self.young} unreferenced objects inside the grace period, {self.unchecked} envelopes not checked",
        ]
        if self.mirrors:
            out.insert(1, f"mirrors {', '.join(self.mirrors)} (reference.topic.renames) scanned with them")
        if self.stable_offsets:
            out.append(f"  transactions open: last stable offsets {json.dumps(self.stable_offsets, sort_keys=True)}")
        out += [f"  orphan: {o.store} {o.locator} (written {_iso(o.written_ms)})" for o in self.orphans]
        out += [f"  dangling: {d.topic}[{d.partition}]@{d.offset} -> {d.store} {d.locator}" for d in self.dangling]
        out += [f"  broken: {t}[{p}]@{o}: {e}" for t, p, o, e in self.broken]
        out += [f"  undecided: {u.store} {u.locator}: {u.reason}" for u in self.undecided]
        if self.aborted_envelopes:
            out.append(f"  {self.aborted_envelopes} envelopes of aborted transactions point at deleted payloads")
        if self.withheld is not None:
            out.append(f"  kept all {len(self.orphans)} orphans: {self.withheld}")
        out += [f"  deleted: {locator}" for locator in self.deleted]
        out += [f"  aborted upload: {label}" for label in self.aborted]
        out += [f"  failed to delete: {locator}: {error}" for locator, error in self.failed]
        return out


def _iso(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC: what an operator reads and what other tools parse."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
