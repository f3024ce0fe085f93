"""Azure Blob Storage through ``azure-storage-blob``: the requests :class:`~stores.blob.BlobStore` makes.

The official SDK, chosen by measurement against obstore on Azurite (docs/stores.md, "Choosing the
client"): obstore was faster on 1 MB writes and on reads, the SDK 2.4x faster on 50 MB writes, and
one library for both clouds was not to be had (obstore cannot talk to fake-gcs-server). Large
objects are a block upload of ``part_bytes`` blocks, ``max_concurrency`` at a time; with
``validate_content`` every request body carries its MD5, checked by the service.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from azure.core import exceptions as aex
from urllib3 import exceptions as u3ex

from gateway.core.buffers import BytesBuilder
from gateway.errors import PayloadIntegrityError, PayloadNotFoundError, StoreError, StoreUnavailableError
from stores.blob import BlobEntry, ObjectHead, ViewReader

_T = TypeVar("_T")
READ_BLOCK_BYTES = 1024 * 1024
"""What one read of a response body hands over before it is copied into its place in the value."""


class AzureBackend:
    """One container on a ``ContainerClient`` (thread-safe for these calls)."""

    scheme = "abs"
    cloud = "Azure Blob"

    def __init__(
        self, container: Any, *, part_bytes: int, single_put_bytes: int, max_concurrency: int, validate_content: bool
    ) -> None:
        self.container = container
        self.part_bytes = part_bytes
        self.max_concurrency = max_concurrency
        self.validate_content = validate_content
        # the SDK splits from max_single_put_size on, in blocks of max_block_size
        container._config.max_single_put_size = single_put_bytes
        container._config.max_block_size = part_bytes

    def put(self, key: str, data: memoryview, metadata: Mapping[str, str], *, large: bool) -> None:
        _mapped(
            lambda: self.container.upload_blob(
                key,
                ViewReader(data),
                length=len(data),
                metadata={k.replace("-", "_"): v for k, v in metadata.items()},  # C# identifiers only
                overwrite=True,
                max_concurrency=self.max_concurrency if large else 1,
                validate_content=self.validate_content,
            )
        )

    def get(self, key: str, length: int | None) -> bytes:
        return _mapped(lambda: self._read(key, length))

    def read_into(self, key: str, start: int, view: memoryview) -> int:
        return _mapped(lambda: _drain(self._download(key, start, len(view)), view))

    def _read(self, key: str, length: int | None) -> bytes:
        """The object (its first ``length`` bytes at most) in one request, its body read into one buffer its size."""
        response = self._download(key, 0, length)
        size = int(response.headers.get("Content-Length") or 0)
        builder = BytesBuilder(size)
        got = 0

        def read_into(view: memoryview) -> None:
            nonlocal got
            got = _drain(response, view)

        builder.fill(size, read_into)
        return builder.build() if got == size else builder.partial()[:got]

    def _download(self, key: str, start: int, length: int | None) -> Any:
        """One GET of the blob from ``start`` (``length`` bytes when given), its body not yet read.

        The SDK's generated operation, which its own download sends (authentication, retries, API
        version and the 404 mapping as there), with the response handed back unread: the SDK's
        ``StorageStreamDownloader`` joins each response's body from 4 KiB pieces and holds about nine
        times its size meanwhile (azure-storage-blob 12.31), which forced 2 MiB requests, five per
        10 MB payload at 20-45 ms each on Azurite (docs/stores.md, "Reads")."""
        blob = self.container.get_blob_client(key)
        span = f"bytes={start}-{start + length - 1}" if length is not None else f"bytes={start}-" if start else None
        return blob._client.blob.download(range=span, cls=_unread)

    def head(self, key: str) -> ObjectHead:
        props = _mapped(lambda: self.container.get_blob_client(key).get_blob_properties())
        return ObjectHead(int(props.size), dict(props.metadata or {}), None)  # no peer records an Azure ETag

    def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            try:
                _mapped(lambda k=key: self.container.delete_blob(k))  # type: ignore[misc]
            except PayloadNotFoundError:
                continue

    def list(self, prefix: str) -> Iterator[BlobEntry]:
        blobs = _mapped(lambda: iter(self.container.list_blobs(name_starts_with=prefix)))
        while True:
            blob = _mapped(lambda: next(blobs, None))
            if blob is None:
                return
            yield BlobEntry(blob.name, int(blob.last_modified.timestamp() * 1000))

    def close(self) -> None:
        self.container.close()


def _unread(pipeline_response: Any, _body: Any, _headers: Any) -> Any:
    """The generated operation's ``cls`` hook: its azure-core response, the body still on the socket."""
    return pipeline_response.http_response


def _drain(response: Any, view: memoryview) -> int:
    """The response's body read into ``view`` a block at a time: the bytes written.

    Read to its end, the response returns its connection to the pool; cut short (an error, an object that
    grew), it is closed, connection and all, so no unread body is left on a pooled connection."""
    done = False
    written = 0
    try:
        for block in _blocks(response, len(view)):
            end = written + len(block)
            if end > len(view):
                raise PayloadIntegrityError(f"the object sent more than the {len(view)} bytes asked for")
            view[written:end] = block
            written = end
        done = True
        return written
    finally:
        if not done:
            response.close()


def _blocks(response: Any, size: int) -> Iterator[bytes]:
    """The body as it arrives, in blocks of up to ``READ_BLOCK_BYTES`` on azure-core's default (requests)
    transport; another transport's own pieces through azure-core's public ``iter_raw``."""
    raw: Any = getattr(getattr(response, "internal_response", None), "raw", None)
    if not callable(getattr(raw, "read", None)):
        yield from response.iter_raw()
        return
    left = size + 1  # a byte past the view: an object larger than asked for is seen, not cut
    while block := raw.read(min(READ_BLOCK_BYTES, max(left, 1))):
        left -= len(block)
        yield block


def _mapped(fn: Callable[[], _T]) -> _T:
    """``fn()`` with azure-core's errors raised as the gateway's: 404 not found, 429/5xx/network unavailable."""
    try:
        return fn()
    except aex.ResourceNotFoundError as exc:
        raise PayloadNotFoundError(f"Azure Blob: {exc.reason or exc}") from exc
    except aex.HttpResponseError as exc:
        status = int(exc.status_code or 0)
        if "Md5Mismatch" in str(getattr(exc, "error_code", "")) or "Md5Mismatch" in str(exc):
            raise PayloadIntegrityError(f"Azure Blob: checksum mismatch: {exc.reason}") from exc
        if status == 429 or status >= 500:
            raise StoreUnavailableError(f"Azure Blob is failing: {exc.reason}") from exc
        raise StoreError(f"Azure Blob refused the request: {exc.reason or exc}") from exc
    except (aex.ServiceRequestError, aex.ServiceResponseError, OSError, u3ex.HTTPError) as exc:
        # urllib3's: a body read straight off the socket (_blocks), outside azure-core's own mapping
        raise StoreUnavailableError(f"Azure Blob endpoint unreachable: {exc}") from exc
    except aex.AzureError as exc:
        raise StoreError(f"Azure Blob error: {exc}") from exc
