"""The read side of :class:`~stores.S3Store`: one GET per payload, its size checked before the body is read.

Peers' objects (bakdata, kaf-s3, AWS pointers) are read through the same GET, but only inside this
store's bucket and prefix: configuring a store for a peer's bucket is how a reader grants access.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from gateway.errors import LocatorError, PayloadIntegrityError
from stores.base import StoreLifecycle
from stores.s3 import _io as s3_io
from stores.s3._locator import S3Locator

_T = TypeVar("_T")


class S3Reads(StoreLifecycle):
    """:meth:`get` and the peer reads of :class:`~stores.S3Store`, which this is mixed into."""

    bucket: str
    prefix: str
    _read_args: dict[str, str]

    if TYPE_CHECKING:  # provided by S3Store

        def validate_locator(self, locator: str) -> S3Locator: ...
        def _call(self, fn: Callable[[], _T], *, missing: str | None = None) -> _T: ...

    def get(self, locator: str, expected_size: int | None = None) -> bytes:
        """One GET; the size is checked against ``expected_size`` before the body is read."""
        parsed = self.validate_locator(locator)
        self._check_open()
        started = time.perf_counter()
        data, _ = self._get_object(
            parsed.key, locator, lambda n: expected_size is None or n == expected_size, f"expected {expected_size}"
        )
        self._done("get", started, locator, len(data))
        return data

    def _get_object(
        self,
        key: str,
        name: str,
        size_ok: Callable[[int], bool],
        expected: str,
        admit: Callable[[Mapping[str, str]], None] | None = None,
    ) -> tuple[bytes, str | None]:
        """The body and ETag of one GET; ``size_ok`` judges the Content-Length, and ``admit`` the object's
        metadata, before the body is read."""
        resp = self._call(lambda: self.client.get_object(Bucket=self.bucket, Key=key, **self._read_args), missing=name)
        body_stream = resp["Body"]
        length = int(resp.get("ContentLength", -1))
        try:
            if admit is not None:
                admit(resp.get("Metadata") or {})
            if not size_ok(length):
                self._metrics.add("errors")
                raise PayloadIntegrityError(f"object {name!r} has {length} bytes, {expected}")
            data = self._call(lambda: s3_io.read_body(body_stream, length))
        finally:
            body_stream.close()
        if len(data) != length:
            self._metrics.add("errors")
            raise PayloadIntegrityError(f"object {name!r}: read {len(data)} bytes, Content-Length was {length}")
        etag = resp.get("ETag")
        return data, etag.strip('"') if isinstance(etag, str) else None

    # -- objects other libraries wrote (bakdata, kaf-s3, AWS pointers) ---------------------------
    def holds_object(self, bucket: str, key: str) -> bool:
        """True when ``s3://bucket/key`` lies in this store's bucket and prefix: the confinement rule.

        Configuring a store for a peer's bucket and prefix is how a reader grants access to the
        objects a peer library wrote there; a pointer anywhere else is never fetched.
        """
        return (
            bucket == self.bucket
            and key.startswith(self.prefix)
            and len(key.encode("utf-8", "surrogatepass")) <= 1024
            and not any(seg in (".", "..") for seg in key.split("/"))
            and key.isprintable()
        )

    def get_object(
        self, key: str, max_bytes: int, admit: Callable[[Mapping[str, str]], None] | None = None
    ) -> tuple[bytes, str | None]:
        """A peer's object and its ETag; :class:`LocatorError` outside this store, no I/O then.

        ``admit`` judges the object's metadata (the reference rules: is it one of ours?) from the GET's
        own response, before the body is read; what it raises is raised."""
        name = f"s3://{self.bucket}/{key}"
        if not self.holds_object(self.bucket, key):
            raise LocatorError(f"{name[:300]!r} is outside store {self.name!r} (prefix {self.prefix!r})")
        self._check_open()
        started = time.perf_counter()
        data, etag = self._get_object(
            key, name, lambda n: 0 <= n <= max_bytes, f"more than the limit of {max_bytes}", admit
        )
        self._done("get", started, name, len(data))
        return data, etag
