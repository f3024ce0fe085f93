"""Fetching referenced payloads: validate, fetch ahead in parallel under a byte budget, verify.

The consumer finds envelopes in a fetched batch before it hands any message out, so payloads for
the next messages are already on their way while the application works on the current one.
Verification (size, then the envelope's BLAKE3 or SHA-256) runs in the worker threads: both
release the GIL, so large payloads hash in parallel with the consumer loop.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from gateway.errors import GatewayError, StoreUnavailableError
from gateway.peer_payloads import DEFAULT_PEER_MAX_BYTES, resolve_record
from gateway.protocol.envelope import Envelope
from gateway.protocol.peers import PeerPointer, PeerRecord
from gateway.store import Store

DEFAULT_WORKERS = 4
DEFAULT_BUDGET = 64_000_000


class Resolver:
    """Resolves envelopes against named stores; one per consumer (or Spark task).

    ``budget`` caps the bytes of payloads fetched ahead and not yet taken; a single payload larger
    than the budget is still fetched, alone, when it is the one needed next.
    """

    def __init__(
        self,
        stores: Mapping[str, Store],
        *,
        workers: int = DEFAULT_WORKERS,
        budget: int = DEFAULT_BUDGET,
        peer_max_bytes: int = DEFAULT_PEER_MAX_BYTES,
    ) -> None:
        self.stores = dict(stores)
        self.budget = budget
        self.peer_max_bytes = peer_max_bytes
        self._workers = max(1, workers)
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: OrderedDict[Hashable, tuple[Envelope, Future[bytes]]] = OrderedDict()
        self._ahead_bytes = 0
        self._lock = threading.Lock()
        self.counters = {"fetched": 0, "fetched.bytes": 0, "prefetched": 0, "errors": 0, "peer.records": 0}

    def _store(self, envelope: Envelope) -> Store:
        store = self.stores.get(envelope.store)
        if store is None:
            raise StoreUnavailableError(
                f"the envelope names store {envelope.store!r}, but this consumer has {sorted(self.stores) or 'none'}"
            )
        return store

    def _fetch(self, envelope: Envelope) -> bytes:
        # the store validates the locator (and its size claim) before any I/O
        payload: bytes = self._store(envelope).get(envelope.locator, envelope.size)
        envelope.verify(payload)
        return payload

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="gateway-resolve")
        return self._pool

    def prefetch(self, key: Hashable, envelope: Envelope) -> bool:
        """Start fetching ``envelope`` in the background if the budget allows.

        False only when the budget says wait; an envelope naming a store this reader lacks is
        never fetched ahead (its record reports the error in its turn), so it answers True and
        does not hold up the envelopes behind it.
        """
        with self._lock:
            if key in self._ahead or envelope.store not in self.stores:
                return True
            if self._ahead and self._ahead_bytes + envelope.size > self.budget:
                return False
            self._ahead[key] = (envelope, self._executor().submit(self._fetch, envelope))
            self._ahead_bytes += envelope.size
            self.counters["prefetched"] += 1
            return True

    def resolve(self, key: Hashable, envelope: Envelope) -> bytes:
        """The verified payload; raises the typed store or integrity error."""
        with self._lock:
            entry = self._ahead.pop(key, None)
            if entry is not None:
                self._ahead_bytes -= entry[0].size
        try:
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

    def resolve_peer(self, record: PeerRecord) -> tuple[bytes | None, bytes | None]:
        """``(key, value)`` of a record another library wrote (not fetched ahead: such topics are draining)."""
        try:
            key, value = resolve_record(self.stores, record, self.peer_max_bytes)
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
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
