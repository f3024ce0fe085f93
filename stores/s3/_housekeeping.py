"""Housekeeping of :class:`~stores.S3Store`'s prefix: incomplete multipart uploads and the expiry rule.

Neither shows in a listing of objects: a producer killed mid-upload leaves parts that are billed
but invisible, and objects outlive their envelopes unless a lifecycle rule expires them. ``gateway
gc`` and the set-up tools call these; the requests are :class:`~stores.s3._backend.S3Backend`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.errors import LocatorError
from gateway.store import IncompleteUpload
from stores.base import StoreLifecycle
from stores.s3._backend import S3Backend

_T = TypeVar("_T")


class S3Housekeeping(StoreLifecycle):
    """Multipart uploads and the lifecycle rule of :class:`~stores.S3Store`, which this is mixed into."""

    s3: S3Backend
    prefix: str
    _key_re: re.Pattern[str]

    if TYPE_CHECKING:  # provided by BlobStore

        def _call(self, fn: Callable[[], _T], *, missing: str | None = None) -> _T: ...

    def list_incomplete_uploads(self, older_than_ms: int) -> list[IncompleteUpload]:
        """Multipart uploads of this store's payload keys initiated strictly before ``older_than_ms``.

        A producer killed mid-upload leaves its parts behind; no listing of objects shows them and
        the pending marker only names the key, so a sweeper has to look here too. Uploads of keys
        that are not this store's payloads (someone else's under the same prefix) are not listed.
        """
        self._check_open()
        uploads = self._call(lambda: self.s3.list_uploads(self.prefix))
        found: list[IncompleteUpload] = []
        while (upload := self._call(lambda: next(uploads, None))) is not None:
            key, upload_id, initiated = upload
            if self._key_re.fullmatch(key) is not None and initiated < older_than_ms:
                found.append(IncompleteUpload(key, upload_id, initiated))
        return found

    def abort_upload(self, upload: IncompleteUpload) -> None:
        """Abort one incomplete upload (its parts are freed); an upload already gone counts as done."""
        if self._key_re.fullmatch(upload.key) is None:
            raise LocatorError(f"{upload.key!r} is not a payload key of {self!r}")
        self._check_open()
        self._call(lambda: self.s3.abort_upload(upload.key, upload.upload_id))

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
        current = self._call(self.s3.lifecycle_rules)
        rules = [r for r in current if r.get("ID") != rule_id] + [rule]
        self._call(lambda: self.s3.put_lifecycle_rules(rules))
        return rule
