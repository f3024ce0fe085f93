"""What bytes a reference message's store keeps: compressed first (ciphertext does not compress), then sealed.

Apart from the write itself, because the choice is per payload (compression is skipped where it
does not pay off) and decides what the envelope's digest describes: the application's bytes, or
the sealed ones when payloads are encrypted.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from gateway.encryption import Encryption, ReferenceEncryption
from gateway.protocol.compression import pays_off
from gateway.protocol.payload_encoding import encode_payload
from gateway.store import Payload, Store


@dataclass(frozen=True, slots=True)
class StoredForm:
    """A payload as its store keeps it, and what its envelope's digest and size describe."""

    stored: Payload
    digested: Payload
    """The application's payload, or ``stored`` when sealed (a sealed payload's envelope describes it)."""
    codec: str | None
    """``reference.compression``'s codec, or None where it did not pay off for this payload."""
    encryption: Encryption | None
    recheck_size: bool
    """Compressed, then sealed: the stored size is known only now, and is checked again."""


def stored_form(
    payload: Payload,
    store: Store,
    topic: str,
    message_id: uuid.UUID,
    compression: str | None,
    encryption: ReferenceEncryption,
) -> StoredForm:
    codec = compression
    if codec is not None and not pays_off(payload, codec):  # decided per payload: stored as is
        codec = None
    encoded = encode_payload(payload, codec)  # compressed first: ciphertext does not compress
    sealed = encryption.seal(store, topic, message_id, encoded)
    if sealed is None:
        return StoredForm(encoded, payload, codec, None, False)
    return StoredForm(sealed.payload, sealed.payload, codec, sealed.encryption, encoded is not payload)


__all__ = ["StoredForm", "stored_form"]
