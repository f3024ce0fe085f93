"""Small builders shared by the tests."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from gateway import HybridConsumer
from gateway.errors import GatewayError
from gateway.protocol import LM_HEADER, split
from gateway.protocol.headers import Headers, last_header
from gateway.store import Store
from gateway.testing.demo import pattern_bytes

STREAM_PART_BYTES = 5 * 1024 * 1024
"""``reference.stream.part.bytes``' minimum: the part size of the ``streaming_store`` fixture's stores."""


def payload(size: int, seed: int = 0) -> bytes:
    return pattern_bytes(str(seed), size)


def random_payload(size: int) -> bytes:
    return os.urandom(size)


def segments(
    value: bytes,
    segment_size: int,
    *,
    key: bytes | None = b"k",
    header_only: bool = False,
    message_id: uuid.UUID | None = None,
) -> list[tuple[bytes | None, Headers]]:
    """(value, headers) of each segment record LinkedIn's splitter would write."""
    records = split("t", None, 1, message_id or uuid.uuid4(), key, value, segment_size, [], header_only=header_only)
    return [(bytes(r.value) if r.value is not None else None, r.headers) for r in records]


def lm_of(headers: Headers) -> bytes | None:
    return last_header(headers, LM_HEADER)


def sha(data: bytes | bytearray | memoryview | None) -> str:
    """Hex SHA-256 of a value, a null value hashing as empty: tests compare whole messages by it."""
    return hashlib.sha256(data or b"").hexdigest()


def sha_or_none(data: bytes | None) -> str | None:
    """Like :func:`sha`, but a null value (a tombstone) stays ``None``, distinct from an empty one."""
    return None if data is None else sha(data)


def consume_all(consumer: HybridConsumer, want: int, timeout: float = 60) -> tuple[list[Any], list[GatewayError]]:
    """Poll until ``want`` messages or typed errors arrived (or ``timeout``): errors are collected, not raised."""
    got: list[Any] = []
    errors: list[GatewayError] = []
    deadline = time.monotonic() + timeout
    while len(got) + len(errors) < want and time.monotonic() < deadline:
        try:
            msg = consumer.poll(0.5)
        except GatewayError as exc:
            errors.append(exc)
            continue
        if msg is not None and msg.error() is None:
            got.append(msg)
    return got, errors


def digest_of_reads(stream: Any, step: int) -> str:
    """The SHA-256 of what ``stream`` reads, ``step`` bytes a call, to its end."""
    out = hashlib.sha256()
    while part := stream.read(step):
        out.update(part)
    return out.hexdigest()


def rewrite_stored(store: Store, locator: str, change: Callable[[bytes], bytes]) -> None:
    """Replace a payload stored in Redis or S3 with ``change(payload)`` through the store's raw client, behind
    its envelope's back (the envelope stays as it was)."""
    from stores import RedisStore, S3Store

    if isinstance(store, RedisStore):
        parsed = store.validate_locator(locator)
        keys = parsed.keys(store.prefix)
        stored = change(b"".join(store.client.get(key) for key in keys))
        for index, key in enumerate(keys):
            store.client.set(key, stored[index * parsed.entry_bytes : (index + 1) * parsed.entry_bytes])
        return
    assert isinstance(store, S3Store)
    key = store.validate_locator(locator).key
    stored = store.client.get_object(Bucket=store.bucket, Key=key)["Body"].read()
    store.client.put_object(Bucket=store.bucket, Key=key, Body=change(stored))
