"""Whether a message whose store is down may go inline instead, and the one account of every fallback.

Inline (chunked, as the writer's ``send_chunked`` sends it) puts the payload in Kafka itself. Against
what the store route gives, per guarantee:

* **encryption** (``reference.encryption``): lost. Inline records are LinkedIn's format, read byte for
  byte by other clients, and never sealed; so a producer that seals never falls back inline, it
  refuses (``FallbackRefusedError``, reason ``encrypted``). Another store would keep it (the setting
  seals on every store of the producer), but choosing one is a policy's business, not this fallback's.
* **topic binding**: kept by nature: the records are the topic's own, there is no locator to move.
* **compression** (``reference.compression``): not applied inline. It shrinks the store's bytes, an
  optimisation and not a promise (librdkafka's ``compression.type`` still compresses the batches);
  what bounds an inline message is ``reference.fallback.inline.max.bytes``, which refuses (``oversize``).

A route forced with ``route=`` (or a compacted topic's, which must not be chunked) is refused too
(``forced``). Every fallback, taken or refused, is counted and logged here, at most one line per
store and outcome per ``log.warning.interval.ms``; the lines left out are counted in ``warnings.suppressed``.
"""

from __future__ import annotations

import logging

from gateway.errors import FallbackRefusedError
from gateway.producer._metrics import ProducerMetrics
from gateway.telemetry.logs import RateLimitedLog

log = logging.getLogger(__name__)

FORCED = "forced"
ENCRYPTED = "encrypted"
OVERSIZE = "oversize"


def refusal(*, forced: bool, encrypted: bool, size: int, cap: int) -> str | None:
    """Why a message whose store is down may not go inline (``FORCED``, ``ENCRYPTED``, ``OVERSIZE``); None: it may."""
    if forced:
        return FORCED
    if encrypted:
        return ENCRYPTED
    if size > cap:
        return OVERSIZE
    return None


def _explain(reason: str, size: int, cap: int) -> str:
    if reason == FORCED:
        return "the route was forced"
    if reason == ENCRYPTED:
        return (
            "reference.encryption is set and inline records are not encrypted: the payload is not sent in clear"
            " (docs/security.md)"
        )
    return f"{size} bytes exceed reference.fallback.inline.max.bytes={cap}"


class FallbackGuard:
    """Decides, counts and logs each fallback of the reference route (see the module's docstring)."""

    def __init__(
        self, cap: int, encrypted: bool, metrics: ProducerMetrics, warnings: RateLimitedLog | None = None
    ) -> None:
        self.cap = cap
        self.encrypted = encrypted
        self._metrics = metrics
        self._warnings = warnings if warnings is not None else RateLimitedLog(log)

    def check(self, store: str, forced: bool, topic: str, size: int, why: str, cause: BaseException | None) -> None:
        """Return when the message may go inline (counted and logged as taken); else raise the refusal.

        Raised as :class:`FallbackRefusedError`, from ``produce`` when the store was found down there,
        or to the message's ``on_delivery`` when a write in the window failed later; either way before
        any byte of the message was queued for Kafka or written to a store.
        """
        reason = refusal(forced=forced, encrypted=self.encrypted, size=size, cap=self.cap)
        metrics = self._metrics
        if reason is None:
            metrics.fallbacks += 1
            self._warn(
                f"inline:{store}", "store %r %s: %d bytes for %s sent inline (chunked) instead", store, why, size, topic
            )
            return
        metrics.fallback_refused += 1
        if reason == FORCED:
            metrics.fallback_refused_forced += 1
        elif reason == ENCRYPTED:
            metrics.fallback_refused_encrypted += 1
        else:
            metrics.fallback_refused_oversize += 1
        explained = _explain(reason, size, self.cap)
        self._warn(f"{reason}:{store}", "store %r %s: %d bytes for %s refused: %s", store, why, size, topic, explained)
        raise FallbackRefusedError(
            f"store {store!r} {why}; not chunking instead because {explained}", store=store, reason=reason
        ) from cause

    def _warn(self, kind: str, message: str, *args: object) -> None:
        self._warnings.warning(kind, message, *args)
        self._metrics.warnings_suppressed = self._warnings.suppressed
