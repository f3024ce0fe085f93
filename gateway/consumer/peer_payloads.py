"""Fetching the objects peer libraries' pointers name, through the stores the reader was given.

The confinement rule is the envelopes' rule: a pointer arrives in a record anyone with write
access to the topic can forge, so it is only followed into a configured store that holds it (an
``S3Store``, ``GCSStore`` or ``AzureBlobStore`` of the pointer's scheme whose bucket and prefix contain
the object). A pointer outside every one is a
:class:`~gateway.errors.LocatorError` raised before any request. Integrity: kaf-s3 records the
SHA-256 of the uncompressed payload and the stored object's ETag, and both are checked; bakdata
and AWS record nothing to check by, so their payloads are only bounded in size.

A pointer can name an object our own producer wrote, for an envelope, in the same buckets: the
store hands the object's metadata to the reference rules before the body is read
(:meth:`~gateway.consumer.reference_rules.ReferenceRules.check_pointer`), so such an object is
refused like its envelope copied into the pointer's topic, and never served unopened.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from gateway.consumer.reference_rules import ReferenceRules, object_written_for
from gateway.errors import LocatorError, PayloadIntegrityError
from gateway.protocol.compression import decompress
from gateway.protocol.peers import PeerPart, PeerPointer, PeerRecord
from gateway.settings import consumer as keys
from gateway.store import Store

DEFAULT_PEER_MAX_BYTES = keys.PEER_MAX_BYTES.default
"""``large.message.peer.max.bytes``: the largest object (and decompressed payload) a peer pointer may name."""


def store_for(stores: Mapping[str, Store], pointer: PeerPointer) -> Store:
    """The configured store holding ``pointer``'s object, or :class:`LocatorError` (no I/O): one of its
    scheme (:attr:`Store.scheme`) whose bucket and prefix hold the key."""
    for store in stores.values():
        if store.scheme == pointer.scheme and store.holds_object(pointer.bucket, pointer.key):
            return store
    kind = {"gs": "a GCSStore", "abs": "an AzureBlobStore"}.get(pointer.scheme, "an S3Store")
    raise LocatorError(
        f"{pointer.format.value} pointer {pointer.uri[:300]!r} is outside every configured store: give the reader"
        f" {kind} for that bucket and prefix to read it"
    )


def fetch_pointer(
    stores: Mapping[str, Store], pointer: PeerPointer, max_bytes: int, *, topic: str, rules: ReferenceRules
) -> bytes:
    """The payload behind ``pointer`` in a record of ``topic``, confined by ``rules``, decompressed and checked
    against what the peer recorded."""

    def admit(metadata: Mapping[str, str]) -> None:
        rules.check_pointer(pointer, topic, object_written_for(pointer.key, metadata))

    data, etag = store_for(stores, pointer).get_object(pointer.key, max_bytes, admit)
    if pointer.etag is not None and etag is not None and pointer.etag != etag:
        raise PayloadIntegrityError(
            f"object {pointer.uri!r} has ETag {etag}, the pointer recorded {pointer.etag}: it was replaced"
        )
    payload = decompress(data, pointer.compression, max_bytes)
    if pointer.sha256 is not None and hashlib.sha256(payload).digest() != pointer.sha256:
        raise PayloadIntegrityError(f"object {pointer.uri!r} does not match the SHA-256 its pointer recorded")
    return payload


def resolve_part(
    stores: Mapping[str, Store], part: PeerPart, max_bytes: int, *, topic: str, rules: ReferenceRules
) -> bytes | None:
    if isinstance(part, PeerPointer):
        return fetch_pointer(stores, part, max_bytes, topic=topic, rules=rules)
    return part


def resolve_record(
    stores: Mapping[str, Store], record: PeerRecord, max_bytes: int, *, topic: str, rules: ReferenceRules
) -> tuple[bytes | None, bytes | None]:
    """``(key, value)`` of a peer's record in ``topic``; every pointer is checked for confinement before any is
    fetched, and each object against the topic binding before its body is read."""
    for pointer in record.pointers():
        store_for(stores, pointer)
    return (
        resolve_part(stores, record.key, max_bytes, topic=topic, rules=rules),
        resolve_part(stores, record.value, max_bytes, topic=topic, rules=rules),
    )
