"""Seal a payload for its record before the store write, and open it after the read: the two calls the routes make."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from gateway.core.buffers import BytesBuilder
from gateway.encryption._provider import KeyProvider, ask
from gateway.errors import EncryptionError, PayloadAuthenticationError
from gateway.protocol.encryption import (
    DEFAULT_SEGMENT_LOG2,
    NONCE_BYTES,
    Binding,
    Encryption,
    PayloadCipher,
    Value,
    plaintext_size_of,
)


@dataclass(frozen=True, slots=True)
class Sealed:
    """A sealed payload (what the store writes) and what its envelope must say about it."""

    payload: bytearray
    encryption: Encryption


def seal(
    provider: KeyProvider, binding: Binding, plaintext: Value, *, segment_log2: int = DEFAULT_SEGMENT_LOG2
) -> Sealed:
    """Seal ``plaintext`` under a fresh data key for the record ``binding`` names.

    ``binding.locator`` must be the locator the store will give the sealed payload: the writer asks
    the store for it first (``Store.locator_for``), since the store writes only what is sealed.
    """
    data_key = ask(provider, "make a data key", lambda: provider.new_data_key(binding.key_context()))
    encryption = Encryption(data_key.key_id, data_key.wrapped, secrets.token_bytes(NONCE_BYTES), segment_log2)
    size = memoryview(plaintext).nbytes
    return Sealed(PayloadCipher(data_key.plaintext, encryption, binding, size).seal(plaintext), encryption)


def open_sealed(provider: KeyProvider, encryption: Encryption, binding: Binding, stored: Value) -> bytes:
    """The plaintext of ``stored`` as one ``bytes`` written once (no copy after decryption), or a typed
    error before any byte of it is returned.

    :class:`~gateway.errors.KeyUnavailableError` when the provider lacks the key (its subclass
    :class:`~gateway.errors.KeyProviderUnavailableError` when it could not be asked now);
    :class:`~gateway.errors.PayloadAuthenticationError` when the payload or its wrapped key is not
    the one sealed for ``binding``.
    """
    stored_size = memoryview(stored).nbytes
    plaintext_size = plaintext_size_of(stored_size, encryption.segment_log2)
    if plaintext_size is None:
        raise PayloadAuthenticationError(
            f"encrypted payload at {binding.locator!r} has {stored_size} bytes, which no sealed payload has: truncated"
        )
    data_key = ask(
        provider,
        f"unwrap the data key of {binding.locator!r} (key {encryption.key_id!r})",
        lambda: provider.unwrap(encryption.key_id, encryption.wrapped_key, binding.key_context()),
    )
    if not isinstance(data_key, (bytes, bytearray)) or len(data_key) != 32:
        got = f"{len(data_key)}-byte data key" if isinstance(data_key, (bytes, bytearray)) else type(data_key).__name__
        raise EncryptionError(f"the key provider unwrapped a {got}, not a 32-byte data key")
    builder = BytesBuilder(plaintext_size)
    PayloadCipher(data_key, encryption, binding, plaintext_size).open_into(stored, builder.fill)
    return builder.build()
