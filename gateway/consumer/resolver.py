"""Fetching referenced payloads: validate, fetch ahead in parallel under a byte budget, verify.

The consumer finds envelopes in a fetched batch before it hands any message out, so payloads for
the next messages are already on their way while the application works on the current one.
Verification (size, then the envelope's BLAKE3 or SHA-256) runs in the worker threads: both
release the GIL, so large payloads hash in parallel with the consumer loop.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gateway.consumer.peer_payloads import DEFAULT_PEER_MAX_BYTES, resolve_record
from gateway.consumer.reference_rules import DEFAULT_RULES, ReferenceRules
from gateway.core.streams.plan import OFF, StreamSettings
from gateway.encryption import ReferenceEncryption
from gateway.errors import (
    GatewayError,
    KeyProviderUnavailableError,
    StoreError,
    StoreNotConfiguredError,
    StoreUnavailableError,
)
from gateway.protocol.envelope import Envelope
from gateway.protocol.peers import PeerPointer, PeerRecord
from gateway.settings import consumer as keys
from gateway.store import Store, locator_topic
from gateway.streams import open_stream
from gateway.streams.payload_stream import PayloadStream

DEFAULT_WORKERS = keys.FETCH_WORKERS.default
DEFAULT_BUDGET = keys.FETCH_BUDGET_BYTES.default
"""Bytes fetched ahead and not yet taken: three 10 MB payloads ahead already keep four fetch threads busy,
so a larger budget buys no read rate and holds more payloads in memory (measured in docs/consumer.md
§6, "Fetching referenced payloads ahead")."""
GROUP_BELOW = 1 << 19
"""Payloads smaller than this are fetched ahead in groups, one round trip each, from stores with ``get_many``.

Larger ones go to the workers, one request each, and verify in parallel: a group's payloads are
received and hashed one after another on one thread, which the consumer ends up waiting for once
payloads are large, while for small ones the round trips a group saves count for more. Around this
size the two ways read alike (measured in docs/consumer.md §6, "Fetching referenced payloads ahead")."""
WAIT_S = 300.0
WAIT_BYTES_PER_S = 1_000_000
"""How long the reader waits for a payload fetched ahead: ``WAIT_S`` plus a second per ``WAIT_BYTES_PER_S`` of it.

A backstop, not the bound that matters: every fetch ends (the stores' and key providers' own
timeouts end a call that gets no answer, and every outcome settles its future, see
:meth:`Resolver._fetch_group`), so it fires only for a client configured without a timeout that
never answers. It then reports which part had not answered, as a transient error."""
GROUP_MAX_ITEMS = 64
GROUP_MAX_BYTES = 4_000_000
"""A group's first payload waits for the whole group: kept small enough that the next group overlaps it."""


@dataclass(slots=True, eq=False)
class _Ahead:
    """A payload fetched ahead: the future the reader takes it from, and how far its worker got.

    ``stage`` (``queued``, ``reading``, ``opening``) lets a wait that hits its bound say which part
    had not answered: the store, or the key provider.
    """

    envelope: Envelope
    future: Future[bytes] = field(default_factory=Future)
    stage: str = "queued"


@dataclass(frozen=True, slots=True)
class Admission:
    """What :meth:`Resolver.judge` said of ``envelope`` in a record of ``topic``; ``refusal`` None: fetch it."""

    envelope: Envelope
    topic: str
    refusal: GatewayError | None = None


class _AheadBook:
    """Payloads fetched ahead and not yet taken, under a byte budget, and the threads that fetch them.

    What to fetch, and how a payload is read and opened, is the :class:`Resolver`'s; this keeps the
    futures, the bytes they hold against ``budget``, and the two pools, all behind one lock (the
    reader takes entries while the workers run).
    """

    def __init__(self, workers: int, budget: int) -> None:
        self.budget = budget
        """``reference.fetch.budget.bytes``: one payload larger than it still goes, alone."""
        self._workers = max(1, workers)
        self._pool: ThreadPoolExecutor | None = None
        self._group_pool: ThreadPoolExecutor | None = None
        self._entries: OrderedDict[Hashable, _Ahead] = OrderedDict()
        self.bytes = 0
        """Bytes of the payloads fetched ahead and not yet taken."""
        self._lock = threading.Lock()

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="gateway-resolve")
        return self._pool

    def _group_executor(self) -> ThreadPoolExecutor:
        """One thread for every group: pipelining already overlaps their round trips, and more
        threads only contend for the GIL over small replies (four read slower than one, see
        docs/consumer.md §6)."""
        if self._group_pool is None:
            self._group_pool = ThreadPoolExecutor(1, thread_name_prefix="gateway-resolve-group")
        return self._group_pool

    def _over_budget(self, size: int) -> bool:
        """Whether ``size`` more bytes must wait; one payload is always allowed when nothing is ahead."""
        return bool(self._entries) and self.bytes + size > self.budget

    def start(self, key: Hashable, envelope: Envelope, fetch: Callable[[Envelope, _Ahead], bytes]) -> bool | None:
        """Fetch ``envelope`` for ``key`` on a worker: True when started, None when it is ahead already,
        False when the budget says wait."""
        with self._lock:
            if key in self._entries:
                return None
            if self._over_budget(envelope.size):
                return False
            ahead = self._entries[key] = _Ahead(envelope)
            self._executor().submit(_settle, ahead, partial(fetch, envelope, ahead))
            self.bytes += envelope.size
            return True

    def start_group(
        self, items: Sequence[tuple[Hashable, Envelope]], fetch: Callable[[list[_Ahead]], None]
    ) -> tuple[int, int]:
        """Fetch ``items`` in one group (see :meth:`Resolver.prefetch_many`): how many of them were taken, and
        how many of those were started now."""
        taken: list[_Ahead] = []
        count = 0
        with self._lock:
            fresh = sum(envelope.size for key, envelope in items if key not in self._entries)
            if self._entries and self.bytes + fresh > self.budget:
                return 0, 0
            for key, envelope in items:
                if key not in self._entries:
                    if self._over_budget(envelope.size):
                        break
                    ahead = self._entries[key] = _Ahead(envelope)
                    self.bytes += envelope.size
                    taken.append(ahead)
                count += 1
            if taken:
                self._group_executor().submit(fetch, taken)
        return count, len(taken)

    def take(self, key: Hashable) -> _Ahead | None:
        """The entry fetched ahead for ``key``, out of the book (its bytes no longer count), or None."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self.bytes -= entry.envelope.size
            return entry

    def forget(self, key: Hashable) -> bool:
        entry = self.take(key)
        if entry is None:
            return False
        entry.future.cancel()
        return True

    def discard(self, keep: Callable[[Hashable], bool]) -> None:
        with self._lock:
            for key in [k for k in self._entries if not keep(k)]:
                entry = self._entries.pop(key)
                entry.future.cancel()
                self.bytes -= entry.envelope.size

    def close(self) -> None:
        self.discard(lambda _: False)
        for pool in (self._pool, self._group_pool):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self._pool = self._group_pool = None


class Resolver:
    """Resolves envelopes against named stores; one per consumer (or Spark task).

    ``budget`` caps the bytes of payloads fetched ahead and not yet taken; a single payload larger
    than the budget is still fetched, alone, when it is the one needed next. ``rules`` say which
    envelopes are fetched at all (:meth:`admit`).
    """

    def __init__(
        self,
        stores: Mapping[str, Store],
        *,
        workers: int = DEFAULT_WORKERS,
        budget: int = DEFAULT_BUDGET,
        peer_max_bytes: int = DEFAULT_PEER_MAX_BYTES,
        rules: ReferenceRules | None = None,
        encryption: ReferenceEncryption | None = None,
        streams: StreamSettings = OFF,
    ) -> None:
        self.stores = dict(stores)
        self.streams = streams
        """``value.stream.*``: payloads at or above the threshold are handed out as streams, never fetched ahead."""
        self._open_streams: weakref.WeakSet[PayloadStream] = weakref.WeakSet()
        self.rules = DEFAULT_RULES if rules is None else rules
        self.peer_max_bytes = peer_max_bytes
        self.encryption = encryption if encryption is not None else ReferenceEncryption(None)
        """Opens sealed payloads (``reference.encryption``); without a key provider they are ``KeyUnavailableError``."""
        self._ahead = _AheadBook(workers, budget)
        self.counters = {
            "fetched": 0,
            "fetched.bytes": 0,
            "prefetched": 0,
            "errors": 0,
            "peer.records": 0,
            "streams": 0,
        }

    def _store(self, envelope: Envelope) -> Store:
        store = self.stores.get(envelope.store)
        if store is None:
            raise StoreNotConfiguredError(
                f"the envelope names store {envelope.store!r}, but this consumer was given"
                f" {sorted(self.stores) or 'no stores'}: pass it in stores= (HybridConsumer, the Spark source)"
            )
        return store

    def judge(self, envelope: Envelope, topic: str) -> Admission:
        """Whether the envelope of a record in ``topic`` may be fetched, and if not the typed error why.

        The one place the rules are applied, before any store is asked: a declared size above
        ``reference.max.payload.bytes`` (:class:`PayloadTooLargeError`), a store this reader lacks,
        a locator the store refuses (:class:`LocatorError`), and a payload written for a topic this
        record's topic is not (:class:`LocatorTopicError`). Fetch-ahead judges before it fetches,
        and :meth:`resolve_admitted` raises the refusal in the record's turn.
        """
        try:
            self.rules.check_size(envelope)
            self.rules.check_topic(envelope, topic, locator_topic(self._store(envelope), envelope.locator))
        except GatewayError as exc:
            return Admission(envelope, topic, exc)
        except Exception as exc:  # noqa: BLE001 - a store's bug: typed, as resolve types what a fetch raises
            failed = StoreUnavailableError(f"checking {envelope.locator!r} with {envelope.store!r} failed: {exc}")
            failed.__cause__ = exc
            return Admission(envelope, topic, failed)
        return Admission(envelope, topic)

    def _fetch(self, envelope: Envelope, ahead: _Ahead | None = None) -> bytes:
        # the store validates the locator (and its size claim) before any I/O
        store = self._store(envelope)
        if ahead is not None:
            ahead.stage = "reading"
        stored = store.get(envelope.locator, envelope.stored_size)
        if ahead is not None:
            ahead.stage = "opening"
        return self._open(envelope, store, stored)

    def _open(self, envelope: Envelope, store: Store, stored: bytes) -> bytes:
        """What the store returned, opened (sealed), decoded (compressed) and checked: every read ends here."""
        return self.encryption.open(envelope, store, stored, limit=self.rules.max_payload_bytes)

    def prefetch(self, key: Hashable, envelope: Envelope) -> bool:
        """Start fetching ``envelope`` (one :meth:`judge` admitted) in the background if the budget allows.

        False only when the budget says wait; an envelope naming a store this reader lacks is
        never fetched ahead (its record reports the error in its turn), so it answers True and
        does not hold up the envelopes behind it.
        """
        if envelope.store not in self.stores or self.streams.streams(envelope):
            return True  # a streamed payload is read as the application reads it, not ahead
        started = self._ahead.start(key, envelope, self._fetch)
        if started:
            self.counters["prefetched"] += 1
        return started is not False

    def groups(self, envelope: Envelope) -> bool:
        """Whether ``envelope``'s payload is fetched ahead in a group (small, from a store with ``get_many``)."""
        store = self.stores.get(envelope.store)
        return (
            envelope.size < GROUP_BELOW
            and store is not None
            and store.reads_in_groups
            and not self.streams.streams(envelope)
        )

    def prefetch_many(self, items: Sequence[tuple[Hashable, Envelope]]) -> int:
        """Start fetching several small payloads of one store in one request; how many of ``items`` were taken.

        Taken in order until the budget says wait (the rest, ``items[n:]``, are for later), each
        with its own future, so :meth:`resolve` takes them one at a time as it takes the others.
        While payloads are ahead, a group waits until the budget has room for all of it: cut to the
        room left, a full budget would send each group as soon as one payload was taken, one
        payload per round trip, which throws away what grouping gains (see docs/consumer.md §6).
        """
        count, started = self._ahead.start_group(items, self._fetch_group)
        self.counters["prefetched"] += started
        return count

    def _fetch_group(self, group: list[_Ahead]) -> None:
        """One ``get_many`` for the group; each future gets its verified payload or its own error.

        Every future is settled whatever happens, here or in opening a payload (a key provider's
        own exception included): the reader waits on them, and an unsettled one would hold its
        ``poll`` until the wait's bound.
        """
        first = group[0].envelope
        outcomes: list[bytes | BaseException]
        store: Any = None
        try:
            for ahead in group:
                ahead.stage = "reading"
            store = self._store(first)
            outcomes = list(store.get_many([(ahead.envelope.locator, ahead.envelope.stored_size) for ahead in group]))
            if len(outcomes) != len(group):
                raise StoreError(f"get_many of store {first.store!r} answered {len(outcomes)} of {len(group)}")
        except Exception as exc:  # noqa: BLE001 - handed to every future: each resolve() raises it typed
            outcomes = [exc] * len(group)
        try:
            for ahead, outcome in zip(group, outcomes, strict=True):
                ahead.stage = "opening"
                if isinstance(outcome, BaseException):
                    _fail(ahead.future, outcome)
                else:
                    _settle(ahead, partial(self._open, ahead.envelope, store, outcome))
        finally:  # an interrupt while opening one: the others still get an answer
            for ahead in group:
                _fail(ahead.future, StoreUnavailableError(f"fetching {ahead.envelope.locator!r} was interrupted"))

    def resolve(self, key: Hashable, envelope: Envelope, *, topic: str) -> bytes | PayloadStream:
        """The verified payload of the envelope in a record of ``topic``; raises the typed error (:meth:`judge`,
        store, integrity)."""
        return self.resolve_admitted(key, self.judge(envelope, topic))

    def resolve_admitted(self, key: Hashable, admission: Admission) -> bytes | PayloadStream:
        """:meth:`resolve` with the envelope judged already (at the scan: a locator parse costs µs, and a
        refused locator is counted by its store once)."""
        envelope = admission.envelope
        entry = self._ahead.take(key)
        try:
            if admission.refusal is not None:
                raise admission.refusal
            if self.streams.streams(envelope):
                return self._stream(key, envelope)
            payload = _wait(entry) if entry is not None and entry.envelope == envelope else self._fetch(envelope)
        except GatewayError:
            self.counters["errors"] += 1
            raise
        except Exception as exc:  # a store bug or a client error we did not map: still typed for the caller
            self.counters["errors"] += 1
            raise StoreUnavailableError(f"fetching {envelope.locator!r} from {envelope.store!r} failed: {exc}") from exc
        self.counters["fetched"] += 1
        self.counters["fetched.bytes"] += len(payload)
        return payload

    def _stream(self, key: Hashable, envelope: Envelope) -> PayloadStream:
        """The envelope's payload as a stream (:mod:`gateway.streams._open`), closed with this resolver."""
        stream = open_stream(
            key,
            envelope,
            self._store(envelope),
            settings=self.streams,
            encryption=self.encryption,
            read_whole=partial(self._fetch, envelope),
        )
        self._open_streams.add(stream)
        self.counters["streams"] += 1
        return stream

    def resolve_peer(self, record: PeerRecord, *, topic: str) -> tuple[bytes | None, bytes | None]:
        """``(key, value)`` of a record of ``topic`` another library wrote (not fetched ahead: such topics are
        draining), under the same rules as envelopes (:meth:`ReferenceRules.check_pointer`)."""
        try:
            key, value = resolve_record(self.stores, record, self.peer_max_bytes, topic=topic, rules=self.rules)
        except GatewayError:
            self.counters["errors"] += 1
            raise
        except Exception as exc:  # a client error we did not map: still typed for the caller
            self.counters["errors"] += 1
            raise StoreUnavailableError(f"fetching a {record.format.value} payload failed: {exc}") from exc
        self.counters["peer.records"] += 1
        for part, resolved in ((record.key, key), (record.value, value)):
            if isinstance(part, PeerPointer):
                self.counters["fetched"] += 1
                self.counters["fetched.bytes"] += len(resolved or b"")
        return key, value

    def forget(self, key: Hashable) -> bool:
        """Drop the fetch ahead for ``key`` (its record was handled without it); True when one was held."""
        return self._ahead.forget(key)

    def discard(self, keep: Callable[[Hashable], bool]) -> None:
        """Forget fetches whose key ``keep`` rejects (seek, revoke); running ones finish unobserved."""
        self._ahead.discard(keep)

    def metrics(self) -> dict[str, int]:
        """``resolver.*`` counters and the bytes fetched ahead and not yet taken."""
        out = {f"resolver.{k}": v for k, v in self.counters.items()}
        out["resolver.ahead.bytes"] = self._ahead.bytes
        return out

    def close(self) -> None:
        for stream in list(self._open_streams):
            stream.invalidate()  # its next read raises PayloadStreamClosedError: its store goes with us
        self._ahead.close()


def _settle(ahead: _Ahead, work: Callable[[], bytes]) -> None:
    """Run ``work`` for ``ahead`` unless it was forgotten meanwhile, and settle its future with the outcome.

    The one place a fetch-ahead future gets its answer: whatever ``work`` raises is set on the
    future (an interrupt is set too, then raised on), so the reader waiting on it always wakes up.
    """
    if not ahead.future.set_running_or_notify_cancel():
        return  # forgotten meanwhile (seek, revoke, handled without it)
    try:
        payload = work()
    except BaseException as exc:
        ahead.future.set_exception(exc)
        if not isinstance(exc, Exception):
            raise
    else:
        ahead.future.set_result(payload)


def _fail(future: Future[bytes], exc: BaseException) -> None:
    """Settle ``future`` with ``exc`` if nothing else did (it may be cancelled meanwhile, then left so)."""
    if future.done():
        return
    if future.running() or future.set_running_or_notify_cancel():
        future.set_exception(exc)


def _wait(ahead: _Ahead) -> bytes:
    """The payload fetched ahead, waited for within :data:`WAIT_S`; past it, a transient error naming the
    part that had not answered."""
    envelope = ahead.envelope
    bound = WAIT_S + envelope.size / WAIT_BYTES_PER_S
    try:
        return ahead.future.result(timeout=bound)
    except TimeoutError:
        if ahead.future.done():
            raise  # the fetch's own TimeoutError, not the wait's: typed by the caller
    where = f"{envelope.locator!r}"
    if ahead.stage == "opening" and envelope.encryption is not None:
        raise KeyProviderUnavailableError(
            f"opening {where} had no answer within {bound:.0f} s: its key provider did not answer"
        )
    doing = "reading it from" if ahead.stage == "reading" else "waiting for a fetch worker (busy reading) from"
    raise StoreUnavailableError(f"{where} had no answer within {bound:.0f} s {doing} store {envelope.store!r}")
