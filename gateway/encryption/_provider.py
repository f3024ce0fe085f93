"""The key provider contract: where data keys come from and how the envelope's wrapped key is opened again."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DataKey:
    """A fresh data key: ``plaintext`` seals one payload and is then dropped; ``wrapped`` travels in the envelope.

    ``repr`` never shows the plaintext key, so a data key that reaches a log or a traceback leaks nothing.
    """

    key_id: str
    plaintext: bytes = field(repr=False)
    wrapped: bytes = field(repr=False)


class KeyProvider(abc.ABC):
    """Makes data keys and unwraps them: a local key ring, AWS KMS, or your own (subclass and implement both).

    ``context`` is what the wrapped key is bound to (the record's topic and message id, see
    :meth:`gateway.protocol.encryption.Binding.key_context`): a provider must refuse to unwrap under
    another context (KMS's encryption context; a key ring's authenticated data). Errors are typed:
    :class:`~gateway.errors.KeyUnavailableError` when the key id is unknown or the provider cannot be
    reached, :class:`~gateway.errors.PayloadAuthenticationError` when the wrapped key is not genuine
    for this context.
    """

    @abc.abstractmethod
    def new_data_key(self, context: Mapping[str, str]) -> DataKey:
        """A fresh 32-byte data key, wrapped under the provider's current key."""

    @abc.abstractmethod
    def unwrap(self, key_id: str, wrapped: bytes, context: Mapping[str, str]) -> bytes:
        """The plaintext data key behind ``wrapped``, wrapped under ``key_id`` for ``context``."""

    def close(self) -> None:
        """Release what the provider holds; the default holds nothing."""
        return None


def canonical_context(context: Mapping[str, str]) -> bytes:
    """``context`` as unambiguous bytes (sorted, length-prefixed), for providers that authenticate it themselves."""
    parts: list[bytes] = []
    for name in sorted(context):
        for text in (name, context[name]):
            raw = text.encode("utf-8")
            parts.append(len(raw).to_bytes(4, "big") + raw)
    return b"".join(parts)
