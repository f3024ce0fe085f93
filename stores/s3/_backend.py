"""S3 (or any S3-compatible endpoint) through boto3: the requests :class:`~stores.blob.BlobStore` makes,
and what a failed one means.

A failure the producer may wait out (5xx, throttling, an unreachable endpoint) is
:class:`StoreUnavailableError`, so its policy can fall back to chunking; a refusal that will not
pass is :class:`StoreError`; a missing object is :class:`PayloadNotFoundError`. Bodies are read
straight into the value (one copy of the payload, not a copy plus its pieces).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from botocore import exceptions as bex

from gateway.core.buffers import BytesBuilder
from gateway.errors import PayloadIntegrityError, PayloadNotFoundError, StoreError, StoreUnavailableError
from stores.blob import BlobEntry, ObjectHead, ViewReader

_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})
_RETRY_LATER = frozenset({
    "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "RequestTimeTooSkewed", "Throttling",
})  # fmt: skip
_READ_CHUNK = 1 << 20
_DELETE_BATCH = 1000
"""DeleteObjects takes at most this many keys."""
_T = TypeVar("_T")


class S3Backend:
    """One bucket on a boto3 S3 client (thread-safe, as boto3 clients are).

    ``write_args`` (SSE, tagging) go on every write, the pending markers included, since a bucket
    policy that requires encryption refuses those too; ``read_args`` (the SSE-C key) on every read.
    """

    scheme = "s3"
    cloud = "S3"

    def __init__(
        self, client: Any, bucket: str, *, write_args: Mapping[str, Any], read_args: Mapping[str, Any], transfer: Any
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.write_args = dict(write_args)
        self.read_args = dict(read_args)
        self.transfer = transfer
        """boto3's TransferConfig for uploads in parts (``large``)."""
        self.send_checksum = _sends_checksums(client)
        """Whether single PUTs carry the payload's SHA-256 as their checksum: unless the client was told
        to send checksums only when required (``request_checksum_calculation``), as users of S3-compatible
        stores that refuse them do."""

    def put(self, key: str, data: memoryview, metadata: Mapping[str, str], *, large: bool) -> None:
        args = {**self.write_args, "Metadata": dict(metadata)}
        if large:
            upload = partial(self.client.upload_fileobj, ExtraArgs=args, Config=self.transfer)
            mapped(lambda: upload(ViewReader(data), self.bucket, key))
            return
        digest = metadata.get("sha256")
        if digest is not None and self.send_checksum:  # S3 checks the envelope's digest; botocore skips its CRC32
            args["ChecksumSHA256"] = base64.b64encode(bytes.fromhex(digest)).decode()
        body = data.obj if isinstance(data.obj, bytes) and len(data.obj) == data.nbytes else data.tobytes()
        mapped(lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **args))

    def get(self, key: str, length: int | None) -> bytes:
        ranged = {} if length is None else {"Range": f"bytes=0-{length - 1}"}
        try:
            resp = mapped(lambda: self.client.get_object(Bucket=self.bucket, Key=key, **ranged, **self.read_args))
        except StoreError as exc:
            if isinstance(exc.__cause__, bex.ClientError) and code(exc.__cause__) == "InvalidRange":
                return b""  # an empty object has no first byte: the caller refuses the size with the numbers
            raise
        body = resp["Body"]
        try:
            return mapped(lambda: _read_body(body, int(resp.get("ContentLength", -1))))
        finally:
            body.close()

    def read_into(self, key: str, start: int, view: memoryview) -> int:
        end = start + len(view) - 1
        resp = mapped(
            lambda: self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end}", **self.read_args)
        )
        body = resp["Body"]
        try:
            return mapped(lambda: _stream_into(body, view))
        finally:
            body.close()

    def head(self, key: str) -> ObjectHead:
        resp = mapped(lambda: self.client.head_object(Bucket=self.bucket, Key=key, **self.read_args))
        etag = resp.get("ETag")
        return ObjectHead(
            int(resp.get("ContentLength", 0)),
            dict(resp.get("Metadata") or {}),
            etag.strip('"') if isinstance(etag, str) else None,
        )

    def delete(self, keys: Sequence[str]) -> None:
        """One DeleteObject (S3 answers 204 for an absent key), or DeleteObjects for up to 1000 at a time."""
        if len(keys) == 1:
            mapped(lambda: self.client.delete_object(Bucket=self.bucket, Key=keys[0]))
            return
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = [{"Key": key} for key in keys[start : start + _DELETE_BATCH]]
            response = mapped(
                partial(self.client.delete_objects, Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            )
            errors = response.get("Errors") if isinstance(response, dict) else None
            if errors:
                raise StoreUnavailableError(f"could not delete {len(errors)} objects: {errors[0]}")

    def list(self, prefix: str) -> Iterator[BlobEntry]:
        for page in self._pages("list_objects_v2", Prefix=prefix):
            for obj in page.get("Contents", []):
                yield BlobEntry(obj["Key"], ms(obj["LastModified"]))

    def close(self) -> None:
        self.client.close()

    # -- what only S3 has: multipart uploads to sweep, lifecycle rules ------------------------------
    def list_uploads(self, prefix: str) -> Iterator[tuple[str, str, int]]:
        """``(key, upload id, initiated ms)`` of every multipart upload under ``prefix`` not completed or aborted."""
        for page in self._pages("list_multipart_uploads", Prefix=prefix):
            for upload in page.get("Uploads", []):
                yield upload["Key"], upload["UploadId"], ms(upload["Initiated"])

    def abort_upload(self, key: str, upload_id: str) -> None:
        """Abort one upload; one already gone counts as done."""
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except bex.ClientError as exc:
            if code(exc) != "NoSuchUpload":
                raise translate(exc) from exc
        except (bex.BotoCoreError, OSError) as exc:
            raise translate(exc) from exc

    def lifecycle_rules(self) -> Sequence[Mapping[str, Any]]:
        """The bucket's lifecycle rules; none configured is an empty list."""
        try:
            rules: Sequence[Mapping[str, Any]] = self.client.get_bucket_lifecycle_configuration(Bucket=self.bucket).get(
                "Rules", []
            )
        except bex.ClientError as exc:
            if code(exc) != "NoSuchLifecycleConfiguration":
                raise translate(exc) from exc
            return []
        except (bex.BotoCoreError, OSError) as exc:
            raise translate(exc) from exc
        return rules

    def put_lifecycle_rules(self, rules: Sequence[Mapping[str, Any]]) -> None:
        """Replace the bucket's whole lifecycle configuration (S3 has no request that adds one rule)."""
        mapped(
            lambda: self.client.put_bucket_lifecycle_configuration(
                Bucket=self.bucket, LifecycleConfiguration={"Rules": [dict(rule) for rule in rules]}
            )
        )

    def _pages(self, operation: str, **params: Any) -> Iterator[dict[str, Any]]:
        pages = mapped(lambda: iter(self.client.get_paginator(operation).paginate(Bucket=self.bucket, **params)))
        while True:
            page = mapped(lambda: next(pages, None))
            if page is None:
                return
            yield page


def mapped(fn: Callable[[], _T]) -> _T:
    """``fn()``, with botocore's errors raised as the gateway's typed store errors."""
    try:
        return fn()
    except bex.ClientError as exc:
        if code(exc) in _NOT_FOUND:
            raise PayloadNotFoundError(f"S3: {exc}") from exc
        raise translate(exc) from exc
    except (bex.BotoCoreError, OSError) as exc:
        raise translate(exc) from exc
    except Exception as exc:  # boto3's S3UploadFailedError and s3transfer's wrappers
        if type(exc).__module__.startswith(("boto3", "s3transfer")):
            raise translate(exc) from exc
        raise


def translate(exc: BaseException) -> StoreError:
    """Unavailable (so the producer may fall back) for what may pass: 5xx, throttling, the network."""
    if isinstance(exc, bex.ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if status >= 500 or code(exc) in _RETRY_LATER:
            return StoreUnavailableError(f"S3 is failing: {exc}")
        return StoreError(f"S3 refused the request: {exc}")
    if isinstance(exc, bex.SSLError):
        return StoreUnavailableError(
            f"S3 endpoint TLS failed (give the endpoint's CA bundle: boto3 verify=, s3.ca.bundle): {exc}"
        )
    if isinstance(exc, (bex.ConnectionError, bex.HTTPClientError, bex.IncompleteReadError, OSError)):
        return StoreUnavailableError(f"S3 endpoint unreachable: {exc}")
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not exc and isinstance(cause, (bex.BotoCoreError, bex.ClientError, OSError)):
        return translate(cause)
    return StoreError(f"S3 error: {exc}")


def code(exc: bex.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _sends_checksums(client: Any) -> bool:
    config = getattr(getattr(client, "meta", None), "config", None)
    return getattr(config, "request_checksum_calculation", "when_supported") == "when_supported"


def _read_body(body: Any, length: int) -> bytes:
    """The body read straight into the value in 1 MiB steps.

    ``length`` is the Content-Length; a body that ends early or runs long is reported by the
    caller's length check (whatever was read is returned).
    """
    if length < 2:
        data: bytes = body.read()
        return data
    builder = BytesBuilder(length)
    extra: list[bytes] = []
    while True:
        chunk = body.read(_READ_CHUNK)
        if not chunk:
            break
        if builder.filled + len(chunk) <= length and not extra:
            builder.append(chunk)
        else:
            extra.append(chunk)
    if builder.filled == length and not extra:
        return builder.build()
    return b"".join([builder.partial(), *extra])  # the wrong size: the caller refuses it with the numbers


def _stream_into(body: Any, view: memoryview) -> int:
    """The body into ``view`` in 1 MiB steps; more than ``view`` holds is :class:`PayloadIntegrityError`."""
    filled = 0
    while True:
        chunk = body.read(_READ_CHUNK)
        if not chunk:
            return filled
        end = filled + len(chunk)
        if end > len(view):
            raise PayloadIntegrityError(f"the object sent more than the {len(view)} bytes asked for")
        view[filled:end] = chunk
        filled = end
