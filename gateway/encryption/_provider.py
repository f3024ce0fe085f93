"""The key provider contract: where data keys come from and how the envelope's wrapped key is opened again."""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from gateway.errors import GatewayError, KeyProviderUnavailableError

_T = TypeVar("_T")


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
    another context (KMS's encryption context; a key ring's authenticated data). Errors say whether
    asking again can help: :class:`~gateway.errors.KeyProviderUnavailableError` when the provider
    cannot answer now (unreachable, throttled, timed out: retried under
    ``reference.error.max.attempts``), :class:`~gateway.errors.KeyUnavailableError` when it never will
    (no such key, key disabled, access denied: final), and
    :class:`~gateway.errors.PayloadAuthenticationError` when the wrapped key is not genuine for this
    context (final). Any other exception a provider raises (a Vault or HSM client's own) is taken
    as the first kind: see :func:`ask`.
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


def ask(provider: KeyProvider, what: str, call: Callable[[], _T]) -> _T:
    """``call()``, a call into ``provider``; what it raises that is not one of the library's errors is
    a :class:`~gateway.errors.KeyProviderUnavailableError` naming the provider.

    Every call into a key provider goes through here, so whatever a user's provider raises (a Vault
    client's ``ConnectionError``, an HSM library's own exception) is typed in one place: as transient,
    since an outage of the service behind the provider is the likely cause and asking again is
    bounded by ``reference.error.max.attempts``. A provider that knows better raises
    :class:`~gateway.errors.KeyUnavailableError` itself for a final refusal. Only the exception's type
    goes into the text (the text of a client's exception may hold a URL or a token); the exception
    itself is the ``__cause__``.
    """
    try:
        return call()
    except GatewayError:
        raise
    except Exception as exc:
        raise KeyProviderUnavailableError(
            f"key provider {type(provider).__name__} failed to {what}: {type(exc).__name__}"
            " (taken as transient: retried under reference.error.max.attempts)"
        ) from exc


def canonical_context(context: Mapping[str, str]) -> bytes:
    """``context`` as unambiguous bytes (sorted, length-prefixed), for providers that authenticate it themselves."""
    parts: list[bytes] = []
    for name in sorted(context):
        for text in (name, context[name]):
            raw = text.encode("utf-8")
            parts.append(len(raw).to_bytes(4, "big") + raw)
    return b"".join(parts)
