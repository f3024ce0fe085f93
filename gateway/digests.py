"""The payload's SHA-256 for its envelope, computed beside the store write where the store allows it.

Hashing a large payload costs about as much as writing it to Redis over loopback, and both release
the GIL (``hashlib`` for inputs over 2 KiB, the socket while it sends). A store that does not need
the digest to write (``needs_digest_to_write = False``, as :class:`~stores.RedisStore`) gets the
payload at once while one worker thread hashes it, and the envelope waits for both. A store that
keeps the digest with the object (S3 metadata) gets it first, as before. Small payloads are hashed
in line: handing them to a thread costs more than it saves.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import Future, ThreadPoolExecutor

OVERLAP_FROM_BYTES = 1 << 20
"""Payloads from this size up are hashed in a worker while the store writes them."""


def _sha256(payload: bytes | bytearray | memoryview) -> bytes:
    return hashlib.sha256(payload).digest()


class PendingDigest:
    """A digest being computed, or already known."""

    __slots__ = ("_digest", "_future")

    def __init__(self, digest: bytes | None = None, future: Future[bytes] | None = None) -> None:
        self._digest = digest
        self._future = future

    def known(self) -> bytes | None:
        """The digest if it is already computed (to hand to the store), else None."""
        return self._digest

    def result(self) -> bytes:
        """The digest, waiting for the worker if it is still hashing."""
        if self._digest is None:
            assert self._future is not None
            self._digest = self._future.result()
        return self._digest


class PayloadDigester:
    """Starts the SHA-256 of each payload sent by reference; one worker thread, started on first need."""

    def __init__(self, overlap_from: int = OVERLAP_FROM_BYTES) -> None:
        self.overlap_from = overlap_from
        self._pool: ThreadPoolExecutor | None = None

    def begin(self, payload: bytes | bytearray | memoryview, store: object) -> PendingDigest:
        if len(payload) < self.overlap_from or getattr(store, "needs_digest_to_write", True):
            return PendingDigest(_sha256(payload))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="gateway-sha256")
        return PendingDigest(future=self._pool.submit(_sha256, payload))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
