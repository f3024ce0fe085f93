"""Google Cloud Storage through ``google-cloud-storage``: the requests :class:`~stores.blob.BlobStore` makes.

The official SDK, chosen by measurement against obstore (docs/stores.md, "Choosing the client"):
obstore speaks GCS's XML API, which fake-gcs-server does not serve, so it could not be tested
here at all. Large objects go up as a resumable upload of ``part_bytes`` chunks (bounded memory,
each chunk's CRC32C checked by the SDK); small ones as one multipart request with its CRC32C.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from google.api_core import exceptions as gex
from google.auth import exceptions as gauth
from google.cloud.storage.retry import DEFAULT_RETRY
from google.resumable_media import common as rmc
from requests import exceptions as rex

from gateway.errors import PayloadIntegrityError, PayloadNotFoundError, StoreError, StoreUnavailableError
from stores.blob import BlobEntry, ObjectHead, ViewReader, ViewWriter

_T = TypeVar("_T")


class GCSBackend:
    """One bucket on a ``google.cloud.storage.Client`` (thread-safe for these calls)."""

    scheme = "gs"
    cloud = "GCS"

    def __init__(self, client: Any, bucket: str, part_bytes: int, retry_deadline_s: float) -> None:
        self.client = client
        self.bucket = client.bucket(bucket)
        self.part_bytes = part_bytes
        self.retry = DEFAULT_RETRY.with_timeout(retry_deadline_s)
        """The SDK's retry of 429, 5xx and connection errors, for at most this long (its default is 120 s).
        Uploads retry too: a payload's key is new and its bytes fixed, so a repeated upload is harmless."""

    def put(self, key: str, data: memoryview, metadata: Mapping[str, str], *, large: bool) -> None:
        blob = self.bucket.blob(key, chunk_size=self.part_bytes if large else None)
        blob.metadata = dict(metadata)
        stream = ViewReader(data)
        _mapped(lambda: blob.upload_from_file(stream, size=len(data), checksum="crc32c", retry=self.retry))

    def get(self, key: str, length: int | None) -> bytes:
        """One GET, its body taken in one read (``single_shot_download``, google-cloud-storage 3.2 on) and kept.

        The SDK's default hands the body over in 8 KiB pieces, about 125 per MB, each a trip through
        urllib3 and a BytesIO: under the consumer's four fetch-ahead threads that doubled the CPU per
        payload against the raw client's single reader (issue 42). ``download_as_bytes`` would copy the
        single read into a BytesIO, two payloads per thread at the peak; :class:`_Body` keeps it."""
        blob = self.bucket.blob(key)
        body = _Body()
        if length is None:  # the whole object, its CRC32C checked by the SDK
            _mapped(lambda: blob.download_to_file(body, checksum="crc32c", retry=self.retry, single_shot_download=True))
        else:
            end = length - 1
            _mapped(
                lambda: blob.download_to_file(
                    body, start=0, end=end, checksum=None, retry=self.retry, single_shot_download=True
                )
            )
        return body.value()

    def read_into(self, key: str, start: int, view: memoryview) -> int:
        writer = ViewWriter(view)
        blob = self.bucket.blob(key)
        end = start + len(view) - 1
        _mapped(lambda: blob.download_to_file(writer, start=start, end=end, checksum=None, retry=self.retry))
        return writer.written

    def head(self, key: str) -> ObjectHead:
        blob = _mapped(lambda: self.bucket.get_blob(key, retry=self.retry))
        if blob is None:
            raise PayloadNotFoundError(f"no object at gs://{self.bucket.name}/{key}")
        return ObjectHead(int(blob.size or 0), dict(blob.metadata or {}), None)  # no peer records a GCS ETag

    def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            try:
                _mapped(lambda k=key: self.bucket.blob(k).delete(retry=self.retry))  # type: ignore[misc]
            except PayloadNotFoundError:
                continue
            except StoreError as exc:
                if isinstance(exc.__cause__, gex.NotFound):
                    continue
                raise

    def list(self, prefix: str) -> Iterator[BlobEntry]:
        pages = _mapped(lambda: iter(self.client.list_blobs(self.bucket, prefix=prefix, retry=self.retry)))
        while True:
            blob = _mapped(lambda: next(pages, None))
            if blob is None:
                return
            yield BlobEntry(blob.name, int(blob.updated.timestamp() * 1000))

    def close(self) -> None:
        self.client.close()


class _Body(io.RawIOBase):
    """A file that keeps what the SDK writes rather than copying it: a single-shot download writes the
    body once, as the bytes urllib3 read it into, and starts over (``seek(0)``) when it must."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._parts.append(data if type(data) is bytes else bytes(data))
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if (offset, whence) != (0, io.SEEK_SET):
            raise io.UnsupportedOperation("a download's body starts over or goes on")
        self._parts.clear()
        return 0

    def value(self) -> bytes:
        return self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)


def _mapped(fn: Callable[[], _T]) -> _T:
    """``fn()`` with the SDK's errors raised as the gateway's: 404 not found, 429/5xx/network unavailable."""
    try:
        return fn()
    except gex.NotFound as exc:
        raise PayloadNotFoundError(f"GCS: {exc}") from exc
    except (gex.TooManyRequests, gex.ServerError, gex.RetryError) as exc:
        raise StoreUnavailableError(f"GCS is failing: {exc}") from exc
    except gex.GoogleAPICallError as exc:
        raise StoreError(f"GCS refused the request: {exc}") from exc
    except rmc.DataCorruption as exc:
        raise PayloadIntegrityError(f"GCS: checksum mismatch: {exc}") from exc
    except rmc.InvalidResponse as exc:
        status = int(getattr(exc.response, "status_code", 0) or 0)
        if status == 404:
            raise PayloadNotFoundError(f"GCS: {exc}") from exc
        if status == 429 or status >= 500:
            raise StoreUnavailableError(f"GCS is failing: {exc}") from exc
        raise StoreError(f"GCS refused the request: {exc}") from exc
    except (rex.ConnectionError, rex.Timeout, OSError, gauth.TransportError) as exc:
        raise StoreUnavailableError(f"GCS endpoint unreachable: {exc}") from exc
    except gauth.GoogleAuthError as exc:
        raise StoreError(f"GCS credentials refused: {exc}") from exc
