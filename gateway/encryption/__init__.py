"""Client-side envelope encryption of referenced payloads (``reference.encryption=aes256-gcm``).

A fresh AES-256 data key per payload seals it in segments (:mod:`gateway.protocol.encryption`); a
:class:`KeyProvider` wraps the data key, and the wrapped key, its key id and the nonce travel in the
envelope. Providers: :class:`LocalKeyRing` (keys from a file or the environment) and
:class:`KmsKeyProvider` (AWS KMS). Needs the ``encryption`` extra (``cryptography``). docs/security.md
describes the threat model and the format.
"""

from gateway.encryption._keyring import LocalKeyRing
from gateway.encryption._kms import KmsKeyProvider
from gateway.encryption._provider import DataKey, KeyProvider, canonical_context
from gateway.encryption._reference import ReferenceEncryption, SealedWrite
from gateway.encryption._sealer import Sealed, open_sealed, seal
from gateway.encryption._stream_cipher import stream_cipher
from gateway.protocol.encryption import ALGORITHMS_BY_NAME, Binding, Encryption

__all__ = [
    "ALGORITHMS_BY_NAME",
    "Binding",
    "DataKey",
    "Encryption",
    "KeyProvider",
    "KmsKeyProvider",
    "LocalKeyRing",
    "ReferenceEncryption",
    "Sealed",
    "SealedWrite",
    "canonical_context",
    "open_sealed",
    "seal",
    "stream_cipher",
]
