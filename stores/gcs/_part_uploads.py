"""GCS's resumable upload, fed a part at a time: what :meth:`GCSStore.put_stream` sends a stream with.

The SDK's ``BlobWriter`` keeps one chunk (``part_bytes``, a multiple of 256 KiB as GCS requires)
and sends it as the session's next range; the total is given with the last range, when the stream
ends, so a stream of unknown size (compressed) goes up the same way. An upload that is not
finished leaves a session that GCS discards after a week and that is no object, listed by nothing
and not billed as storage; there is no request to abort one beyond forgetting it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stores.gcs._backend import GCSBackend, _mapped

_GCS_CHUNK = 256 * 1024
"""GCS takes resumable ranges in multiples of 256 KiB (but the last)."""


class GCSPartUpload:
    """One resumable upload session: opened on the first part, finished by :meth:`complete`."""

    def __init__(self, backend: GCSBackend, key: str, metadata: Mapping[str, str], part_bytes: int) -> None:
        from google.cloud.storage.fileio import BlobWriter

        chunk = max(_GCS_CHUNK, part_bytes // _GCS_CHUNK * _GCS_CHUNK)
        blob = backend.bucket.blob(key, chunk_size=chunk)
        blob.metadata = dict(metadata)
        self._writer: Any = BlobWriter(blob, chunk_size=chunk, retry=backend.retry, checksum="crc32c")

    def add(self, part: memoryview) -> None:
        _mapped(lambda: self._writer.write(part))

    def complete(self) -> None:
        _mapped(self._writer.close)

    def abort(self) -> None:
        """Nothing to send: the session is forgotten, and GCS discards it."""
        return None


class GCSPartUploads:
    """The resumable uploads of one bucket (:class:`~stores.blob.PartUploads`)."""

    def __init__(self, backend: GCSBackend, part_bytes: int) -> None:
        self._backend = backend
        self._part_bytes = part_bytes

    def open_upload(self, key: str, metadata: Mapping[str, str]) -> GCSPartUpload:
        return GCSPartUpload(self._backend, key, metadata, self._part_bytes)
