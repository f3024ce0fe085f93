"""What :class:`~stores.blob.BlobStore` asks of one cloud's client: a handful of object requests.

Each cloud's backend (``stores.s3``, ``stores.gcs``, ``stores.azure``) makes these requests with its official SDK
and raises only the gateway's typed errors: :class:`PayloadNotFoundError` for an object that is not
there, :class:`StoreUnavailableError` for what may pass (5xx, throttling, the network), and
:class:`StoreError` for a refusal that will not. Everything else (layout, journal, confinement,
ranged reads, rollback) is decided once, in the store.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class BlobEntry:
    """One listed object: its key and when it was last written (ms since the epoch, the server's clock)."""

    key: str
    modified_ms: int


@dataclass(frozen=True, slots=True)
class ObjectHead:
    """What a metadata request tells of one object, before any of its bytes are read."""

    size: int
    metadata: Mapping[str, str]
    """The object's user metadata: what tells our objects from a peer's."""
    etag: str | None
    """The ETag without its quotes where a peer's pointer may record one (S3); ``None`` elsewhere."""


class BlobBackend(Protocol):
    """One bucket (S3, GCS) or container (Azure) through its cloud's client."""

    scheme: str
    """The locator scheme: ``s3``, ``gs`` or ``abs``, as bakdata's URIs spell them."""
    cloud: str
    """For messages: ``S3``, ``GCS`` or ``Azure Blob``."""

    def put(self, key: str, data: memoryview, metadata: Mapping[str, str], *, large: bool) -> None:
        """Write one object; ``large``: in parts of bounded size (resumable / block upload), each checksummed."""
        ...

    def get(self, key: str, length: int | None) -> bytes:
        """The object in one request, or only its first ``length`` bytes when given (a range, so a forged
        size costs nothing); ``length`` is never 0."""
        ...

    def read_into(self, key: str, start: int, view: memoryview) -> int:
        """Stream bytes ``[start, start + len(view))`` of the object into ``view``; returns how many came.

        Straight into the caller's value, so that a read in parallel ranges holds no copy of its parts;
        more bytes than ``view`` holds is :class:`PayloadIntegrityError`."""
        ...

    def head(self, key: str) -> ObjectHead:
        """The object's size, user metadata and ETag (one metadata request)."""
        ...

    def delete(self, keys: Sequence[str]) -> None:
        """Delete objects (in as few requests as the cloud allows); absent ones are fine."""
        ...

    def list(self, prefix: str) -> Iterator[BlobEntry]:
        """Objects whose key starts with ``prefix``."""
        ...

    def close(self) -> None: ...


class ViewReader(io.RawIOBase):
    """A file over the caller's buffer (a flat byte view): an upload in parts reads one part at a time, each a copy."""

    def __init__(self, view: memoryview) -> None:
        self._view = view
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int = -1) -> bytes:
        """A read of the whole of a ``bytes`` payload returns that object itself: a single-request upload (Azure's
        Put Blob, GCS's multipart and one-chunk resumable uploads) reads it so, and a copy would cost more CPU than
        the upload does on top of it (1-2 ms per 10 MB). Any other read copies what it returns."""
        end = len(self._view) if size is None or size < 0 else min(len(self._view), self._pos + size)
        whole = self._view.obj
        if self._pos == 0 and end == len(self._view) and type(whole) is bytes and len(whole) == end:
            self._pos = end
            return whole
        chunk = bytes(self._view[self._pos : end])
        self._pos = end
        return chunk

    def readinto(self, buffer: Any) -> int:
        chunk = self.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


class ViewWriter(io.RawIOBase):
    """A file that writes into the caller's buffer, refusing to run past its end (an object that grew)."""

    def __init__(self, view: memoryview) -> None:
        self._view = view
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        size = len(data)
        end = self.written + size
        if end > len(self._view):
            from gateway.errors import PayloadIntegrityError

            raise PayloadIntegrityError(f"the object sent more than the {len(self._view)} bytes asked for")
        self._view[self.written : end] = data
        self.written = end
        return size
