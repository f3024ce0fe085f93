"""The cipher of one stream sealed as it goes up (``produce_stream`` under ``reference.encryption``).

A whole payload is sealed by :func:`~gateway.encryption._sealer.seal`; a stream cannot be held, so
its cipher is made first, for the plaintext size declared, and the producer seals one segment at a
time (:class:`~gateway.protocol.stream_parts.SegmentSealer`). The binding is the one ``seal`` makes:
the locator the store will give the sealed bytes, asked of the store before any is written.
"""

from __future__ import annotations

import secrets
import uuid

from gateway.encryption._provider import ask
from gateway.encryption._reference import ReferenceEncryption
from gateway.errors import ConfigurationError
from gateway.protocol.encryption import NONCE_BYTES, Binding, Encryption, PayloadCipher, sealed_size
from gateway.store import Store


def stream_cipher(
    encryption: ReferenceEncryption,
    store: Store,
    topic: str,
    message_id: uuid.UUID,
    plaintext_size: int,
    part_bytes: int,
) -> PayloadCipher:
    """A fresh data key's cipher for ``plaintext_size`` bytes that ``store`` keeps for ``topic``, ``message_id``."""
    provider = encryption.provider
    assert provider is not None  # an enabled ReferenceEncryption has one (checked at construction)
    log2 = encryption.segment_log2
    locator = store.stream_locator_for(topic, message_id, sealed_size(plaintext_size, log2), part_bytes)
    if locator is None:
        raise ConfigurationError(f"store {store.name!r} cannot say the locator of a payload before writing it")
    binding = Binding(topic, message_id, store.name, locator)
    data_key = ask(provider, "make a data key", lambda: provider.new_data_key(binding.key_context()))
    fields = Encryption(data_key.key_id, data_key.wrapped, secrets.token_bytes(NONCE_BYTES), log2)
    return PayloadCipher(data_key.plaintext, fields, binding, plaintext_size)
