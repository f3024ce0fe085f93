"""A :class:`~gateway.store.Store` on one bucket or container of an object store: S3, GCS or Azure Blob.

One layout, one journal, one reader and one confinement rule for the three clouds, so operators,
``gc`` and bakdata's URIs see the same thing on every cloud: object key ``<prefix><topic>/<message id>``,
locator ``<scheme>://<bucket>/<key>`` (``s3://``, ``gs://`` on GCS, ``abs://`` on Azure, the schemes
bakdata writes), and pending markers under ``<prefix>_pending/`` kept by
:class:`~stores.blob._pending.PendingJournal` (one marker per batch of ids by default). A write
journals first and removes what it left on failure; a delete removes the payload first and its mark
last. Each cloud's backend (:class:`~stores.blob.BlobBackend`) makes only its client's requests.

Reads are bounded by what the envelope says: a payload whose size is known is fetched as a range of
that size plus one byte, so an object larger than announced is refused without reading it; from
``parallel_read_bytes`` on, ranges of ``part_bytes`` are fetched ``max_concurrency`` at a time
straight into the result (one copy of the payload in memory). Writes from ``multipart_threshold``
on go up in parts of ``part_bytes`` (multipart upload on S3, resumable upload on GCS, blocks on
Azure), each checksummed; every object also carries its size in its metadata, and its SHA-256 where the
store records one (``object_sha256``: S3, where it is also the upload's checksum; on GCS and Azure only when
asked for, or when the producer hands it over because the envelope's digest is a SHA-256).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from gateway.errors import LocatorError, PayloadNotFoundError, StoreError
from gateway.protocol.envelope import validate_store_name
from gateway.store import PayloadAddress
from stores.base import (
    TOPIC_PATTERN,
    UUID_PATTERN,
    Payload,
    StoreMetrics,
    parse_object_locator,
    validate_message_id,
    validate_topic,
)
from stores.blob._backend import BlobBackend, BlobEntry
from stores.blob._journal import BlobJournal
from stores.blob._locator import ObjectLocator
from stores.blob._ranges import BlobRanges
from stores.blob._reads import BlobReads

MiB = 1024 * 1024
DEFAULT_PART_BYTES = 8 * MiB
DEFAULT_MULTIPART_THRESHOLD = 32 * MiB
DEFAULT_PARALLEL_READ_BYTES = 16 * MiB
DEFAULT_JOURNAL_BATCH = 64
DEFAULT_JOURNAL_OPEN_MS = 30_000
MAX_PREFIX_LENGTH = 400
_PREFIX = re.compile(r"(?:[A-Za-z0-9._-]+/){0,16}")
_T = TypeVar("_T")


class BlobStore(BlobReads, BlobRanges, BlobJournal):
    """The store over a :class:`~stores.blob.BlobBackend`; :class:`~stores.S3Store`, :class:`~stores.GCSStore`
    and :class:`~stores.AzureBlobStore` choose the backend and check their cloud's bucket names and part sizes."""

    expires_per_payload = False
    """Objects expire by a lifecycle rule on the prefix, never one by one: ``persistent`` changes no write."""

    def __init__(
        self,
        backend: BlobBackend,
        *,
        bucket: str,
        prefix: str,
        name: str,
        part_bytes: int = DEFAULT_PART_BYTES,
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        parallel_read_bytes: int = DEFAULT_PARALLEL_READ_BYTES,
        max_concurrency: int = 4,
        journal_batch: int = DEFAULT_JOURNAL_BATCH,
        journal_open_ms: int = DEFAULT_JOURNAL_OPEN_MS,
        close_client: bool = False,
        object_sha256: bool = True,
    ) -> None:
        if not isinstance(prefix, str) or _PREFIX.fullmatch(prefix) is None or len(prefix) > MAX_PREFIX_LENGTH:
            raise ValueError(
                f"prefix must be empty or '/'-terminated segments of [A-Za-z0-9._-], at most {MAX_PREFIX_LENGTH}"
                f" chars, got {prefix!r}"
            )
        if any(seg in (".", "..") for seg in prefix.split("/")):
            raise ValueError(f"prefix must not contain '.' or '..' segments: {prefix!r}")
        if min(part_bytes, multipart_threshold, parallel_read_bytes, max_concurrency) < 1:
            raise ValueError("part_bytes, multipart_threshold, parallel_read_bytes and max_concurrency must be > 0")
        self.backend = backend
        self.client: Any = backend
        self.scheme = backend.scheme
        self.bucket = bucket
        self.prefix = prefix
        self.name = validate_store_name(name)
        self.part_bytes = part_bytes
        self.multipart_threshold = multipart_threshold
        self.parallel_read_bytes = parallel_read_bytes
        self.max_concurrency = max_concurrency
        self.object_sha256 = object_sha256
        """Whether a payload whose SHA-256 the caller did not hand over is hashed for its ``sha256`` metadata.

        A pass over the payload on the send path, before the upload starts (the metadata goes with it):
        worth it where the cloud checks the upload against it (S3's ``ChecksumSHA256``), not where
        it would only be a second copy of the envelope's digest, which the consumer verifies."""
        self._key_re = re.compile(rf"{re.escape(prefix)}({TOPIC_PATTERN})/({UUID_PATTERN})")
        self.journal = self._open_journal(batch=journal_batch, open_ms=journal_open_ms)
        self.journal_batch = journal_batch
        self.pending_prefix = self.journal.prefix
        self._close_client = close_client
        self._closed = False
        self._metrics = StoreMetrics()
        self._pool: ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, bucket={self.bucket!r}, prefix={self.prefix!r})"

    # -- locators --------------------------------------------------------------------------
    def key_for(self, topic: str, message_id: uuid.UUID) -> str:
        """The object's name in the bucket: ``<prefix><topic>/<message id>``, checked so no input escapes the prefix."""
        return f"{self.prefix}{validate_topic(topic)}/{validate_message_id(message_id)}"

    def locator_for(self, topic: str, message_id: uuid.UUID, size: int = 0) -> str:
        """The object's locator; its size does not change it."""
        return f"{self.scheme}://{self.bucket}/{self.key_for(topic, message_id)}"

    def validate_locator(self, locator: str) -> ObjectLocator:
        """``<scheme>://<this bucket>/<prefix><topic>/<uuid>`` exactly, or :class:`LocatorError`.

        As on S3, whatever a URL layer could reinterpret is refused rather than normalised (non-ASCII,
        controls, spaces, ``%``, ``\\``, ``?``, ``#``), and the key must match the one pattern this
        store writes, so nothing outside the bucket and prefix can be named.
        """
        try:
            parts = parse_object_locator(
                locator,
                scheme=self.scheme,
                bucket=self.bucket,
                prefix=self.prefix,
                key_re=self._key_re,
                label=self.backend.cloud,
            )
            return ObjectLocator(*parts)
        except LocatorError:
            self._metrics.add("locator_rejected")
            raise

    def address_of(self, locator: str) -> PayloadAddress:
        """The topic and id in the locator's key: an envelope is bound to its topic."""
        parsed = self.validate_locator(locator)
        return PayloadAddress(parsed.topic, parsed.message_id)

    # -- store operations ------------------------------------------------------------------
    def put(
        self,
        topic: str,
        message_id: uuid.UUID,
        payload: Payload,
        *,
        pending_since_ms: int | None = None,
        sha256: bytes | None = None,
        persistent: bool = False,
    ) -> str:
        """Marker (unless a batch marker names the id), then the object; on failure whatever was written goes.

        ``sha256``, when given, is trusted as the payload's digest (the producer computed it for the
        envelope) and recorded; otherwise the payload is hashed for it only with ``object_sha256``.
        The consumer checks the envelope's digest against the bytes in any case.
        ``persistent`` changes nothing: every cloud expires objects by a lifecycle rule on the prefix
        (docs/stores.md), not per object, so a compacted topic's payloads need a prefix without one.
        """
        del persistent
        self._check_open()
        locator = self.locator_for(topic, message_id)
        parsed = ObjectLocator(self.bucket, self.key_for(topic, message_id), topic, message_id)
        data = memoryview(payload).cast("B")  # the caller's bytes, never copied here
        if sha256 is not None and len(sha256) != 32:
            raise ValueError("sha256 must be 32 bytes")
        if sha256 is None and self.object_sha256:
            sha256 = hashlib.sha256(data).digest()
        started = time.perf_counter()
        if pending_since_ms is not None:
            self.journal.mark(locator, parsed, pending_since_ms)
        metadata = {"size": str(len(data)), "message-id": str(message_id), "topic": topic}
        if sha256 is not None:
            metadata["sha256"] = sha256.hex()
        large = len(data) >= self.multipart_threshold
        try:
            self._call(lambda: self.backend.put(parsed.key, data, metadata, large=large))
        except StoreError:
            # The object may exist although the call failed; remove it (marker last) if we can,
            # otherwise the marker tells gc where to look.
            with contextlib.suppress(StoreError):
                self.delete(locator)
            raise
        self._done("put", started, locator, len(data))
        return locator

    def delete(self, locator: str) -> None:
        """Object first, then its mark (or its place in a batch marker); absent objects are fine, so this is idempotent.

        A payload journalled in a batch settles its place there; the batch marker goes once nothing
        it names is unsettled.
        """
        parsed = self.validate_locator(locator)
        self._check_open()
        started = time.perf_counter()
        self._call(lambda: self.backend.delete([parsed.key]))
        self.journal.settle([locator])
        self._done("delete", started, locator)

    def list_locators(self, topic: str | None = None) -> Iterator[tuple[str, int]]:
        self._check_open()
        under = self.prefix if topic is None else f"{self.prefix}{validate_topic(topic)}/"
        for entry in self._iterate(under):
            if self._key_re.fullmatch(entry.key) is not None:
                yield f"{self.scheme}://{self.bucket}/{entry.key}", entry.modified_ms

    def close(self) -> None:
        if self._closed:
            return
        self.end_journal_batches()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        self._closed = True
        if self._close_client:
            self.backend.close()

    def _iterate(self, prefix: str) -> Iterator[BlobEntry]:
        entries = self._call(lambda: self.backend.list(prefix))
        while True:
            entry = self._call(lambda: next(entries, None))
            if entry is None:
                return
            yield entry

    def _call(self, fn: Callable[[], _T], *, missing: str | None = None) -> _T:
        """``fn()`` counted: a missing object is :class:`PayloadNotFoundError` only where one was read."""
        try:
            return fn()
        except PayloadNotFoundError as exc:
            self._metrics.add("not_found" if missing is not None else "errors")
            if missing is None:
                raise StoreError(str(exc)) from exc
            raise PayloadNotFoundError(f"no object at {missing!r}") from exc
        except StoreError:
            self._metrics.add("errors")
            raise
