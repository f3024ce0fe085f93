"""``reference.encryption``: the one object the reference writer and the consumer's resolver ask to seal and open.

The producer makes one from its configuration and ``key_provider=``; the writer calls :meth:`seal`
before the store write, and the consumer's resolver calls :meth:`open` after the size and digest
check. Both are a single call at one place, and everything else (key, nonce, binding) is decided
here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from gateway.encryption._provider import KeyProvider, ask
from gateway.encryption._sealer import open_sealed, seal
from gateway.errors import ConfigurationError, EncryptionError, KeyUnavailableError
from gateway.protocol.encryption import (
    ALGORITHMS_BY_NAME,
    DEFAULT_SEGMENT_LOG2,
    Binding,
    Encryption,
    PayloadCipher,
    sealed_size,
)
from gateway.protocol.envelope import Envelope
from gateway.protocol.payload_encoding import decode_payload
from gateway.settings.shared import REFERENCE_ENCRYPTION
from gateway.store import Store, locator_topic

ENCRYPTION_KEY = "reference.encryption"
NONE = "none"
CHOICES = (NONE, *ALGORITHMS_BY_NAME)


@dataclass(frozen=True, slots=True)
class SealedWrite:
    """What the writer stores (``payload``) and what the envelope must carry (``encryption``) for a sealed payload."""

    payload: bytearray
    encryption: Encryption
    locator: str
    """The locator the store must give it (the sealed bytes are bound to it)."""


class ReferenceEncryption:
    """Seals payloads before the store write (when enabled) and opens sealed payloads after the read.

    A consumer with a key provider reads both sealed and clear envelopes (a topic that turned
    encryption on keeps its older records); one without reports a sealed envelope as
    :class:`~gateway.errors.KeyUnavailableError` with its record.
    """

    __slots__ = ("enabled", "provider", "segment_log2")

    def __init__(
        self, provider: KeyProvider | None, *, enabled: bool = False, segment_log2: int = DEFAULT_SEGMENT_LOG2
    ) -> None:
        if provider is not None and not isinstance(provider, KeyProvider):
            raise TypeError(f"key_provider must be a gateway.encryption.KeyProvider, got {type(provider).__name__}")
        if enabled and provider is None:
            raise ConfigurationError(
                f"{ENCRYPTION_KEY}=aes256-gcm needs key_provider= (a LocalKeyRing, KmsKeyProvider)"
            )
        self.provider = provider
        self.enabled = enabled
        self.segment_log2 = segment_log2

    def __repr__(self) -> str:
        return f"ReferenceEncryption(enabled={self.enabled}, provider={self.provider!r})"

    @classmethod
    def from_config(cls, conf: MutableMapping[str, Any], provider: KeyProvider | None) -> ReferenceEncryption:
        """Pop ``reference.encryption`` (``none`` or ``aes256-gcm``) from a producer's configuration."""
        return cls(provider, enabled=REFERENCE_ENCRYPTION.pop(conf, ConfigurationError) != NONE)

    def check_stores(self, stores: Mapping[str, Store]) -> None:
        """Refuse, at construction, a store sealed payloads cannot be bound to (it cannot tell its locator first)."""
        if not self.enabled:
            return
        probe = uuid.UUID(int=0)
        for name, store in stores.items():
            if store.locator_for("gateway-probe", probe, 0) is None:
                raise ConfigurationError(
                    f"store {name!r} cannot say a payload's locator before writing it (Store.locator_for), which"
                    f" {ENCRYPTION_KEY} binds the ciphertext to"
                )

    def stored_size(self, size: int) -> int:
        """What a payload of ``size`` bytes takes in the store, and what its envelope declares."""
        return sealed_size(size, self.segment_log2) if self.enabled else size

    def seal(self, store: Store, topic: str, message_id: uuid.UUID, payload: Any) -> SealedWrite | None:
        """The sealed payload for ``store``'s write of ``payload`` for ``topic``, or ``None`` when disabled."""
        if not self.enabled:
            return None
        assert self.provider is not None  # checked at construction
        locator = store.locator_for(topic, message_id, sealed_size(memoryview(payload).nbytes, self.segment_log2))
        if locator is None:
            raise ConfigurationError(f"store {store.name!r} cannot say the locator of a payload before writing it")
        binding = Binding(topic, message_id, store.name, locator)
        sealed = seal(self.provider, binding, payload, segment_log2=self.segment_log2)
        return SealedWrite(sealed.payload, sealed.encryption, locator)

    def cipher_for(self, envelope: Envelope, store: Store) -> PayloadCipher:
        """The cipher of ``envelope``'s sealed payload, for a reader that opens it segment by segment as it reads
        (:class:`gateway.PayloadStream`): the data key is unwrapped now, once, so a missing key is the record's
        error in its turn as when the payload is read whole."""
        sealed = envelope.encryption
        assert sealed is not None
        provider = self.provider
        if provider is None:
            raise KeyUnavailableError(
                f"the payload at {envelope.locator!r} is encrypted under key {sealed.key_id!r}, and this"
                " consumer has no key_provider"
            )
        topic = locator_topic(store, envelope.locator)
        if topic is None:
            raise ConfigurationError(f"store {envelope.store!r} names no topic in its locators: cannot open it")
        binding = Binding(topic, envelope.message_id, envelope.store, envelope.locator)
        data_key = ask(
            provider,
            f"unwrap the data key of {binding.locator!r} (key {sealed.key_id!r})",
            lambda: provider.unwrap(sealed.key_id, sealed.wrapped_key, binding.key_context()),
        )
        if not isinstance(data_key, (bytes, bytearray)) or len(data_key) != 32:
            raise EncryptionError("the key provider unwrapped something other than a 32-byte data key")
        return PayloadCipher(bytes(data_key), sealed, binding, envelope.payload_size)

    def open(self, envelope: Envelope, store: Store, stored: bytes, *, limit: int) -> bytes:
        """The application's payload, checked against ``envelope``, or a typed error.

        ``limit`` (the reader's ``reference.max.payload.bytes``) bounds the decoding of a payload that
        was compressed before it was sealed: its envelope declares the sealed size only.

        A clear payload is decoded (``reference.compression``) and checked by its digest. A sealed
        one is checked by AES-GCM alone, while it is opened: its tags authenticate every byte under
        the data key and bind them to the record, which the digest (anyone can recompute one) adds
        nothing to, and skipping it saves a pass over the payload. The binding's topic is the one the
        locator names (the topic the payload was written for; the consumer has already checked the
        record's topic against it, renames included).
        """
        encryption = envelope.encryption
        if encryption is None:
            return envelope.open(stored)  # decoded when compressed, and checked by its digest
        if self.provider is None:
            raise KeyUnavailableError(
                f"the payload at {envelope.locator!r} is encrypted under key {encryption.key_id!r}, and this"
                " consumer has no key_provider"
            )
        topic = locator_topic(store, envelope.locator)
        if topic is None:
            raise ConfigurationError(
                f"store {envelope.store!r} names no topic in its locators: cannot open a sealed payload"
            )
        binding = Binding(topic, envelope.message_id, envelope.store, envelope.locator)
        opened = open_sealed(self.provider, encryption, binding, stored)
        return opened if envelope.compression is None else decode_payload(opened, envelope.compression, limit)
