"""A key ring held by the application: AES-256 key-encryption keys from a file or the environment.

Several keys, each under an id: ``current`` wraps every new data key, and every key in the ring
unwraps, so a rotation (add a key, make it current, keep the old one until its payloads have aged
out of the topics) leaves every payload readable. A data key is wrapped by AES-256-GCM under the key
of its id, with the key id and the record's context as authenticated data: 12 bytes of nonce,
32 of key, 16 of tag, 60 in the envelope.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from gateway.encryption._provider import DataKey, KeyProvider, canonical_context
from gateway.errors import ConfigurationError, EnvelopeFormatError, KeyUnavailableError, PayloadAuthenticationError
from gateway.protocol.encryption import KEY_BYTES, NONCE_BYTES, TAG_BYTES, validate_key_id

log = logging.getLogger(__name__)

ENV_PREFIX = "GATEWAY_KEYRING_"
"""``GATEWAY_KEYRING_CURRENT=<id>`` and one ``GATEWAY_KEYRING_KEY_<id>=<base64 of 32 bytes>`` per key."""

_WRAPPED_BYTES = NONCE_BYTES + KEY_BYTES + TAG_BYTES


def _decode_key(key_id: str, text: str) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigurationError(f"key {key_id!r} of the key ring is not valid base64") from None
    if len(key) != KEY_BYTES:
        raise ConfigurationError(f"key {key_id!r} of the key ring has {len(key)} bytes, AES-256 needs {KEY_BYTES}")
    return key


class LocalKeyRing(KeyProvider):
    """Key-encryption keys by id; ``current`` wraps, all unwrap. ``repr`` shows the ids, never a key."""

    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        for key_id, key in keys.items():
            try:
                validate_key_id(key_id)
            except EnvelopeFormatError as exc:
                raise ConfigurationError(f"key ring: {exc}") from None
            if not isinstance(key, bytes) or len(key) != KEY_BYTES:
                raise ConfigurationError(f"key {key_id!r} of the key ring must be {KEY_BYTES} bytes")
        if current not in keys:
            raise ConfigurationError(f"the key ring's current key {current!r} is not among its keys {sorted(keys)}")
        from gateway.protocol.encryption import load_aesgcm

        aesgcm, self._invalid_tag = load_aesgcm()
        self._keys = {key_id: aesgcm(key) for key_id, key in keys.items()}
        self.current = current

    @property
    def key_ids(self) -> list[str]:
        return sorted(self._keys)

    def __repr__(self) -> str:
        return f"LocalKeyRing(current={self.current!r}, key_ids={self.key_ids!r})"

    @classmethod
    def generate_key(cls) -> str:
        """A new random key in the form the file and the environment take (base64 of 32 bytes)."""
        return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> LocalKeyRing:
        """Read ``{"current": "<id>", "keys": {"<id>": "<base64>", ...}}``.

        A file that others than its owner can read is accepted with a warning: the key ring is as
        secret as every payload it protects.
        """
        file = Path(path)
        try:
            mode = file.stat().st_mode
            document = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"cannot read the key ring file {str(file)!r}: {type(exc).__name__}") from None
        if mode & 0o077:
            log.warning("the key ring file %s can be read by other users (mode %o)", file, mode & 0o777)
        if not isinstance(document, dict) or not isinstance(document.get("keys"), dict):
            raise ConfigurationError(f"the key ring file {str(file)!r} must hold {{'current': ..., 'keys': {{...}}}}")
        current = document.get("current")
        if not isinstance(current, str):
            raise ConfigurationError(f"the key ring file {str(file)!r} names no current key")
        keys = {str(key_id): _decode_key(str(key_id), str(text)) for key_id, text in document["keys"].items()}
        return cls(keys, current)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, prefix: str = ENV_PREFIX) -> LocalKeyRing:
        """Read ``<prefix>CURRENT`` and every ``<prefix>KEY_<id>`` (ids limited to what a variable name takes)."""
        env = os.environ if environ is None else environ
        marker = f"{prefix}KEY_"
        keys = {
            name[len(marker) :]: _decode_key(name[len(marker) :], text)
            for name, text in env.items()
            if name.startswith(marker)
        }
        current = env.get(f"{prefix}CURRENT")
        if not keys or current is None:
            raise ConfigurationError(f"no key ring in the environment: set {prefix}CURRENT and {marker}<id>")
        return cls(keys, current)

    def new_data_key(self, context: Mapping[str, str]) -> DataKey:
        data_key = secrets.token_bytes(KEY_BYTES)
        nonce = secrets.token_bytes(NONCE_BYTES)
        wrapped = self._keys[self.current].encrypt(nonce, data_key, self._aad(self.current, context))
        return DataKey(self.current, data_key, nonce + wrapped)

    def unwrap(self, key_id: str, wrapped: bytes, context: Mapping[str, str]) -> bytes:
        aead = self._keys.get(key_id)
        if aead is None:
            raise KeyUnavailableError(f"the key ring has no key {key_id!r} (it has {self.key_ids})")
        if len(wrapped) != _WRAPPED_BYTES:
            raise PayloadAuthenticationError(f"a key ring's wrapped key is {_WRAPPED_BYTES} bytes, got {len(wrapped)}")
        try:
            key: bytes = aead.decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], self._aad(key_id, context))
        except self._invalid_tag:
            raise PayloadAuthenticationError(
                f"the data key wrapped under {key_id!r} failed authentication: the envelope was altered or moved"
            ) from None
        return key

    @staticmethod
    def _aad(key_id: str, context: Mapping[str, str]) -> bytes:
        return b"gateway.keyring.v1\0" + key_id.encode("ascii") + b"\0" + canonical_context(context)
