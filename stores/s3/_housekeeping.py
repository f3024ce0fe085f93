"""Housekeeping of :class:`~stores.S3Store`'s prefix: incomplete multipart uploads and the expiry rule.

Neither shows in a listing of objects: a producer killed mid-upload leaves parts that are billed
but invisible, and objects outlive their envelopes unless a lifecycle rule expires them. ``gateway
gc`` and the set-up tools call these.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from botocore import exceptions as bex

from gateway.errors import LocatorError, StoreError
from gateway.store import IncompleteUpload
from stores.base import StoreLifecycle
from stores.s3 import _io as s3_io

_T = TypeVar("_T")


class S3Housekeeping(StoreLifecycle):
    """Multipart uploads and the lifecycle rule of :class:`~stores.S3Store`, which this is mixed into."""

    bucket: str
    prefix: str
    _key_re: re.Pattern[str]

    if TYPE_CHECKING:  # provided by S3Store

        def _call(self, fn: Callable[[], _T], *, missing: str | None = None) -> _T: ...
        def _failed(self, exc: BaseException) -> StoreError: ...

    # -- incomplete multipart uploads -------------------------------------------------------
    def list_incomplete_uploads(self, older_than_ms: int) -> list[IncompleteUpload]:
        """Multipart uploads of this store's payload keys initiated strictly before ``older_than_ms``.

        A producer killed mid-upload leaves its parts behind; no listing of objects shows them and
        the pending marker only names the key, so a sweeper has to look here too. Uploads of keys
        that are not this store's payloads (someone else's under the same prefix) are not listed.
        """
        self._check_open()
        found: list[IncompleteUpload] = []
        pages = self._call(
            lambda: iter(
                self.client.get_paginator("list_multipart_uploads").paginate(
                    Bucket=self.bucket,
                    Prefix=self.prefix,
                )
            )
        )
        while True:
            page = self._call(lambda: next(pages, None))
            if page is None:
                return found
            for upload in page.get("Uploads", []):
                initiated = s3_io.ms(upload["Initiated"])
                if self._key_re.fullmatch(upload["Key"]) is not None and initiated < older_than_ms:
                    found.append(IncompleteUpload(upload["Key"], upload["UploadId"], initiated))

    def abort_upload(self, upload: IncompleteUpload) -> None:
        """Abort one incomplete upload (its parts are freed); an upload already gone counts as done."""
        if self._key_re.fullmatch(upload.key) is None:
            raise LocatorError(f"{upload.key!r} is not a payload key of {self!r}")
        self._check_open()
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=upload.key, UploadId=upload.upload_id)
        except bex.ClientError as exc:
            if s3_io.code(exc) != "NoSuchUpload":
                raise self._failed(exc) from exc
        except (bex.BotoCoreError, OSError) as exc:
            raise self._failed(exc) from exc

    def ensure_expiry_rule(self, days: int) -> dict[str, Any]:
        """Install (or update) a lifecycle rule expiring everything under the prefix after ``days``.

        ``days`` must cover the topic's retention (see :func:`expiry_days_from_retention`): an object
        expired while its envelope is still in the log is a ``PayloadNotFoundError`` for every
        consumer that replays that far. The rule also expires pending markers, which is the backstop
        if no sweeper runs: marker and payload go together. Incomplete multipart uploads (a producer
        killed mid-upload) are aborted after one day; they are invisible to listings but billed.
        Other rules on the bucket are kept; S3 replaces the whole configuration on every put.
        """
        if isinstance(days, bool) or not isinstance(days, int) or days < 1:
            raise ValueError(f"days must be a positive int, got {days!r}")
        self._check_open()
        rule_id = f"kafka-hybrid-gateway:{self.prefix or '<root>'}"[:255]
        rule: dict[str, Any] = {
            "ID": rule_id,
            "Filter": {"Prefix": self.prefix},
            "Status": "Enabled",
            "Expiration": {"Days": days},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
        }
        try:
            current = self.client.get_bucket_lifecycle_configuration(Bucket=self.bucket).get("Rules", [])
        except bex.ClientError as exc:
            if s3_io.code(exc) != "NoSuchLifecycleConfiguration":
                raise self._failed(exc) from exc
            current = []
        except (bex.BotoCoreError, OSError) as exc:
            raise self._failed(exc) from exc
        rules = [r for r in current if r.get("ID") != rule_id] + [rule]
        self._call(
            lambda: self.client.put_bucket_lifecycle_configuration(
                Bucket=self.bucket,
                LifecycleConfiguration={"Rules": rules},
            )
        )
        return rule
