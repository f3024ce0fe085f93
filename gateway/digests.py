"""The payload's digest for its envelope, computed beside the store write where the store allows it.

Hashing a large payload costs about as much as writing it to Redis over loopback with SHA-256, and
a fifth of that with BLAKE3; both release the GIL, and so does the socket while it sends. A store
that does not need the digest to write (``needs_digest_to_write = False``, as
:class:`~stores.RedisStore`) gets the payload at once while one worker thread hashes it, and the
envelope waits for both. A store that keeps the digest with the object (S3 metadata) gets it first.
Small payloads are hashed in line: handing them to a thread costs more than it saves.

Which algorithm (``reference.checksum``): ``auto`` takes BLAKE3, the fastest, for stores that take
no digest, and SHA-256 for stores that record one (S3's ``sha256`` metadata, which ``aws s3api``
and kaf-s3 users compare); ``sha256`` or ``blake3`` force one for every store.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from gateway.protocol.envelope import CHECKSUM_BLAKE3, CHECKSUM_SHA256, digest_of

OVERLAP_FROM_BYTES = 1 << 20
"""Payloads from this size up are hashed in a worker while the store writes them."""

CHECKSUM_SETTINGS = ("auto", "sha256", "blake3")
"""The values of ``reference.checksum``."""


class PendingDigest:
    """A digest being computed, or already known, by algorithm ``checksum``."""

    __slots__ = ("_digest", "_future", "checksum")

    def __init__(self, checksum: int, digest: bytes | None = None, future: Future[bytes] | None = None) -> None:
        self.checksum = checksum
        self._digest = digest
        self._future = future

    def known_sha256(self) -> bytes | None:
        """The SHA-256 if that is what was computed and it is ready (to hand to the store), else None."""
        return self._digest if self.checksum == CHECKSUM_SHA256 else None

    def result(self) -> bytes:
        """The digest, waiting for the worker if it is still hashing."""
        if self._digest is None:
            assert self._future is not None
            self._digest = self._future.result()
        return self._digest


class PayloadDigester:
    """Starts the digest of each payload sent by reference; one worker thread, started on first need."""

    def __init__(self, setting: str = "auto", overlap_from: int = OVERLAP_FROM_BYTES) -> None:
        if setting not in CHECKSUM_SETTINGS:
            raise ValueError(f"reference.checksum must be one of {', '.join(CHECKSUM_SETTINGS)}, not {setting!r}")
        self.setting = setting
        self.overlap_from = overlap_from
        self._pool: ThreadPoolExecutor | None = None

    def checksum_for(self, needs_digest_to_write: bool) -> int:
        """The algorithm for a payload written to a store that does (or does not) record the digest."""
        if self.setting == "sha256":
            return CHECKSUM_SHA256
        if self.setting == "blake3":
            return CHECKSUM_BLAKE3
        return CHECKSUM_SHA256 if needs_digest_to_write else CHECKSUM_BLAKE3

    def begin(self, payload: bytes | bytearray | memoryview, store: object) -> PendingDigest:
        needs_digest = bool(getattr(store, "needs_digest_to_write", True))
        checksum = self.checksum_for(needs_digest)
        if len(payload) < self.overlap_from or needs_digest:
            return PendingDigest(checksum, digest_of(checksum, payload))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="gateway-digest")
        return PendingDigest(checksum, future=self._pool.submit(digest_of, checksum, payload))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
