"""Fetching referenced payloads: validate, fetch ahead in parallel under a byte budget, verify.

The consumer finds envelopes in a fetched batch before it hands any message out, so payloads for
the next messages are already on their way while the application works on the current one.
Verification (size, then the envelope's BLAKE3 or SHA-256) runs in the worker threads: both
release the GIL, so large payloads hash in parallel with the consumer loop.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gateway.consumer.peer_payloads import DEFAULT_PEER_MAX_BYTES, resolve_record
from gateway.consumer.reference_rules import DEFAULT_RULES, ReferenceRules
from gateway.encryption import ReferenceEncryption
from gateway.errors import GatewayError, StoreError, StoreNotConfiguredError, StoreUnavailableError
from gateway.protocol.envelope import Envelope
from gateway.protocol.peers import PeerPointer, PeerRecord
from gateway.store import Store, locator_topic

DEFAULT_WORKERS = 4
DEFAULT_BUDGET = 32_000_000
"""Bytes fetched ahead and not yet taken: three 10 MB payloads ahead already keep four fetch threads busy,
so a larger budget buys no read rate and holds more payloads in memory (measured in docs/consumer.md
§6, "Fetching referenced payloads ahead")."""
GROUP_BELOW = 1 << 19
"""Payloads smaller than this are fetched ahead in groups, one round trip each, from stores with ``get_many``.

Larger ones go to the workers, one request each, and verify in parallel: a group's payloads are
received and hashed one after another on one thread, which the consumer ends up waiting for once
payloads are large, while for small ones the round trips a group saves count for more. Around this
size the two ways read alike (measured in docs/consumer.md §6, "Fetching referenced payloads ahead")."""
GROUP_MAX_ITEMS = 64
GROUP_MAX_BYTES = 4_000_000
"""A group's first payload waits for the whole group: kept small enough that the next group overlaps it."""


@dataclass(frozen=True, slots=True)
class Admission:
    """What :meth:`Resolver.judge` said of ``envelope`` in a record of ``topic``; ``refusal`` None: fetch it."""

    envelope: Envelope
    topic: str
    refusal: GatewayError | None = None


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
    ) -> None:
        self.stores = dict(stores)
        self.budget = budget
        self.rules = DEFAULT_RULES if rules is None else rules
        self.peer_max_bytes = peer_max_bytes
        self.encryption = encryption if encryption is not None else ReferenceEncryption(None)
        """Opens sealed payloads (``reference.encryption``); without a key provider they are ``KeyUnavailableError``."""
        self._workers = max(1, workers)
        self._pool: ThreadPoolExecutor | None = None
        self._group_pool: ThreadPoolExecutor | None = None
        self._ahead: OrderedDict[Hashable, tuple[Envelope, Future[bytes]]] = OrderedDict()
        self._ahead_bytes = 0
        self._lock = threading.Lock()
        self.counters = {"fetched": 0, "fetched.bytes": 0, "prefetched": 0, "errors": 0, "peer.records": 0}

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

    def _fetch(self, envelope: Envelope) -> bytes:
        # the store validates the locator (and its size claim) before any I/O
        store = self._store(envelope)
        return self._open(envelope, store, store.get(envelope.locator, envelope.stored_size))

    def _open(self, envelope: Envelope, store: Store, stored: bytes) -> bytes:
        """What the store returned, opened (sealed), decoded (compressed) and checked: every read ends here."""
        return self.encryption.open(envelope, store, stored, limit=self.rules.max_payload_bytes)

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

    def prefetch(self, key: Hashable, envelope: Envelope) -> bool:
        """Start fetching ``envelope`` (one :meth:`judge` admitted) in the background if the budget allows.

        False only when the budget says wait; an envelope naming a store this reader lacks is
        never fetched ahead (its record reports the error in its turn), so it answers True and
        does not hold up the envelopes behind it.
        """
        with self._lock:
            if key in self._ahead or envelope.store not in self.stores:
                return True
            if self._over_budget(envelope.size):
                return False
            self._ahead[key] = (envelope, self._executor().submit(self._fetch, envelope))
            self._ahead_bytes += envelope.size
            self.counters["prefetched"] += 1
            return True

    def _over_budget(self, size: int) -> bool:
        """Whether ``size`` more bytes must wait; one payload is always allowed when nothing is ahead."""
        return bool(self._ahead) and self._ahead_bytes + size > self.budget

    def groups(self, envelope: Envelope) -> bool:
        """Whether ``envelope``'s payload is fetched ahead in a group (small, from a store with ``get_many``)."""
        store = self.stores.get(envelope.store)
        return envelope.size < GROUP_BELOW and store is not None and store.reads_in_groups

    def prefetch_many(self, items: Sequence[tuple[Hashable, Envelope]]) -> int:
        """Start fetching several small payloads of one store in one request; how many of ``items`` were taken.

        Taken in order until the budget says wait (the rest, ``items[n:]``, are for later), each
        with its own future, so :meth:`resolve` takes them one at a time as it takes the others.
        While payloads are ahead, a group waits until the budget has room for all of it: cut to the
        room left, a full budget would send each group as soon as one payload was taken, one
        payload per round trip, which throws away what grouping gains (see docs/consumer.md §6).
        """
        taken: list[tuple[Envelope, Future[bytes]]] = []
        count = 0
        with self._lock:
            fresh = sum(envelope.size for key, envelope in items if key not in self._ahead)
            if self._ahead and self._ahead_bytes + fresh > self.budget:
                return 0
            for key, envelope in items:
                if key not in self._ahead:
                    if self._over_budget(envelope.size):
                        break
                    future: Future[bytes] = Future()
                    self._ahead[key] = (envelope, future)
                    self._ahead_bytes += envelope.size
                    taken.append((envelope, future))
                count += 1
            if taken:
                self.counters["prefetched"] += len(taken)
                self._group_executor().submit(self._fetch_group, taken)
        return count

    def _fetch_group(self, group: list[tuple[Envelope, Future[bytes]]]) -> None:
        """One ``get_many`` for the group; each future gets its verified payload or its own typed error."""
        outcomes: list[bytes | BaseException]
        try:
            store: Any = self._store(group[0][0])
            outcomes = list(store.get_many([(envelope.locator, envelope.stored_size) for envelope, _ in group]))
            if len(outcomes) != len(group):
                raise StoreError(f"get_many of store {group[0][0].store!r} answered {len(outcomes)} of {len(group)}")
        except Exception as exc:  # noqa: BLE001 - handed to every future: each resolve() raises it typed
            outcomes = [exc] * len(group)
        for (envelope, future), outcome in zip(group, outcomes, strict=True):
            if not future.set_running_or_notify_cancel():
                continue  # forgotten meanwhile (seek, revoke, handled without it)
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
                continue
            try:
                payload = self._open(envelope, store, outcome)
            except GatewayError as exc:
                future.set_exception(exc)
            else:
                future.set_result(payload)

    def resolve(self, key: Hashable, envelope: Envelope, *, topic: str) -> bytes:
        """The verified payload of the envelope in a record of ``topic``; raises the typed error (:meth:`judge`,
        store, integrity)."""
        return self.resolve_admitted(key, self.judge(envelope, topic))

    def resolve_admitted(self, key: Hashable, admission: Admission) -> bytes:
        """:meth:`resolve` with the envelope judged already (at the scan: a locator parse costs µs, and a
        refused locator is counted by its store once)."""
        envelope = admission.envelope
        with self._lock:
            entry = self._ahead.pop(key, None)
            if entry is not None:
                self._ahead_bytes -= entry[0].size
        try:
            if admission.refusal is not None:
                raise admission.refusal
            payload = entry[1].result() if entry is not None and entry[0] == envelope else self._fetch(envelope)
        except GatewayError:
            self.counters["errors"] += 1
            raise
        except Exception as exc:  # a store bug or a client error we did not map: still typed for the caller
            self.counters["errors"] += 1
            raise StoreUnavailableError(f"fetching {envelope.locator!r} from {envelope.store!r} failed: {exc}") from exc
        self.counters["fetched"] += 1
        self.counters["fetched.bytes"] += len(payload)
        return payload

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
        with self._lock:
            entry = self._ahead.pop(key, None)
            if entry is None:
                return False
            entry[1].cancel()
            self._ahead_bytes -= entry[0].size
            return True

    def discard(self, keep: Callable[[Hashable], bool]) -> None:
        """Forget fetches whose key ``keep`` rejects (seek, revoke); running ones finish unobserved."""
        with self._lock:
            for key in [k for k in self._ahead if not keep(k)]:
                envelope, future = self._ahead.pop(key)
                future.cancel()
                self._ahead_bytes -= envelope.size

    def metrics(self) -> dict[str, int]:
        """``resolver.*`` counters and the bytes fetched ahead and not yet taken."""
        out = {f"resolver.{k}": v for k, v in self.counters.items()}
        out["resolver.ahead.bytes"] = self._ahead_bytes
        return out

    def close(self) -> None:
        self.discard(lambda _: False)
        for pool in (self._pool, self._group_pool):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self._pool = self._group_pool = None
