"""The payload's digest for its envelope, computed beside the store write where the store allows it.

Hashing a large payload is work of the same order as writing it to Redis over loopback (the rates of
both algorithms are in docs/protocol.md §8); both release the GIL, and so does the socket while it
sends. The store gets the payload at once while one worker thread hashes it, and the envelope waits
for both. Only an envelope digest that the store records with the object (a SHA-256, for a store
with ``needs_digest_to_write``: S3 keeps it as ``sha256`` metadata and checks the upload against it)
is computed first and handed to the store, so the payload is hashed once. Small payloads are hashed
in line: handing them to a thread costs more than it saves.

Which algorithm (``reference.checksum``): ``auto`` and ``blake3`` take BLAKE3 for every store;
``sha256`` takes SHA-256, for consumers that read only SHA-256 envelopes. Every consumer verifies
the envelope's digest before it hands a payload out, so the envelope's algorithm is what every read
pays, and BLAKE3 is the faster one by a wide margin (what it changed for S3 reads is measured in
docs/protocol.md §8). An S3 producer still records the SHA-256 in the object's metadata, hashed
beside the BLAKE3.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from gateway.protocol.encryption import Encryption
from gateway.protocol.envelope import CHECKSUM_BLAKE3, CHECKSUM_SHA256, digest_of
from gateway.settings.producer import REFERENCE_CHECKSUM
from gateway.store import Store

OVERLAP_FROM_BYTES = 1 << 20
"""Payloads from this size up are hashed in a worker while the store writes them."""

CHECKSUM_SETTINGS = REFERENCE_CHECKSUM.choices
"""The values of ``reference.checksum``."""


class PendingDigest:
    """A digest being computed, or already known, by algorithm ``checksum``."""

    __slots__ = ("_digest", "_future", "checksum", "compression", "encryption", "size")

    def __init__(
        self, checksum: int, size: int, digest: bytes | None = None, future: Future[bytes] | None = None
    ) -> None:
        self.checksum = checksum
        self.size = size
        """The digested bytes' size: what the envelope declares beside the digest."""
        self._digest = digest
        self._future = future
        self.encryption: Encryption | None = None
        """Set when the digested bytes are a sealed payload (``reference.encryption``): the envelope carries it."""
        self.compression: str | None = None
        """The codec the stored bytes were compressed with, decided per payload: the envelope says which."""

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

    @property
    def checksum(self) -> int:
        """The envelope's algorithm, whatever the store."""
        return CHECKSUM_SHA256 if self.setting == "sha256" else CHECKSUM_BLAKE3

    def hashes_beside(self, payload: bytes | bytearray | memoryview, store: Store) -> bool:
        """Whether :meth:`begin` hands ``payload`` to the worker (and returns at once) rather than hashing it here.

        Such a digest is begun before the store write is sent: sending a payload larger than the
        socket's buffer blocks until the server has read most of it, and a digest begun after that
        overlapped the next message's write but never its own, so the last message of every burst (and
        a lone one) paid write plus hash. A digest hashed here stays after the send, where a payload
        the socket buffer takes at once lets the server read while this thread hashes.
        """
        store_takes_it = self.checksum == CHECKSUM_SHA256 and store.needs_digest_to_write
        return memoryview(payload).nbytes >= self.overlap_from and not store_takes_it

    def begin(self, payload: bytes | bytearray | memoryview, store: Store) -> PendingDigest:
        checksum = self.checksum
        size = memoryview(payload).nbytes
        if not self.hashes_beside(payload, store):
            return PendingDigest(checksum, size, digest_of(checksum, payload))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="gateway-digest")
        return PendingDigest(checksum, size, future=self._pool.submit(digest_of, checksum, payload))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
