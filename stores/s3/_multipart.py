"""S3's multipart upload, one part at a time: what :meth:`S3Store.put_stream` sends a stream with.

boto3's ``upload_fileobj`` also uploads in parts, but reads ahead into its own queue of parts and
threads; a stream that arrives from the producer's reused buffer goes up here one part per request,
in order, so memory is the part in flight. botocore computes each part's checksum (its default, CRC32,
unless the client was told to send checksums only when required); the completion lists the checksums
the parts were stored with, so S3 checks the whole object against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.errors import StoreError
from stores.blob import ViewReader
from stores.s3._backend import S3Backend, mapped

MAX_PARTS = 10_000
"""S3 refuses a part number above this."""


class S3PartUpload:
    """One multipart upload: created on the first part, completed or aborted once."""

    def __init__(self, backend: S3Backend, key: str, metadata: Mapping[str, str]) -> None:
        self._backend = backend
        self._key = key
        client, bucket = backend.client, backend.bucket
        args = {**backend.write_args, "Metadata": dict(metadata)}
        created = mapped(lambda: client.create_multipart_upload(Bucket=bucket, Key=key, **args))
        self.upload_id: str = created["UploadId"]
        self._parts: list[dict[str, Any]] = []

    def add(self, part: memoryview) -> None:
        number = len(self._parts) + 1
        if number > MAX_PARTS:
            raise StoreError(f"S3 takes at most {MAX_PARTS} parts in one upload: raise reference.stream.part.bytes")
        backend = self._backend
        response = mapped(
            lambda: backend.client.upload_part(
                Bucket=backend.bucket,
                Key=self._key,
                UploadId=self.upload_id,
                PartNumber=number,
                Body=ViewReader(part),
                ContentLength=len(part),
                **backend.read_args,  # SSE-C: each part carries the customer key
            )
        )
        entry: dict[str, Any] = {"PartNumber": number, "ETag": response["ETag"]}
        entry.update({k: v for k, v in response.items() if k.startswith("Checksum") and k != "ChecksumType"})
        self._parts.append(entry)

    def complete(self) -> None:
        backend = self._backend
        mapped(
            lambda: backend.client.complete_multipart_upload(
                Bucket=backend.bucket,
                Key=self._key,
                UploadId=self.upload_id,
                MultipartUpload={"Parts": self._parts},
                **backend.read_args,
            )
        )

    def abort(self) -> None:
        self._backend.abort_upload(self._key, self.upload_id)


class S3PartUploads:
    """The multipart uploads of one bucket (:class:`~stores.blob._stream_writes.PartUploads`)."""

    def __init__(self, backend: S3Backend) -> None:
        self._backend = backend

    def open_upload(self, key: str, metadata: Mapping[str, str]) -> S3PartUpload:
        return S3PartUpload(self._backend, key, metadata)
