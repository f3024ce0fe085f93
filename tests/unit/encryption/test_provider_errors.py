"""A key provider's failures, typed and classified: transient ones retried, final ones not, none blamed on the store.

Issue 38: a provider raising ``ConnectionError`` (a Vault or HSM client) reached the consumer untyped
(a hang, or a ``StoreUnavailableError``), and KMS's throttling was as final as a missing key.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import boto3
import pytest
from botocore import exceptions as bex
from botocore.stub import Stubber

from gateway.consumer._errors import ErrorPolicy, UnresolvedSettings, attempt, retriable
from gateway.encryption import Binding, DataKey, KeyProvider, KmsKeyProvider, LocalKeyRing, open_sealed, seal
from gateway.errors import (
    EncryptionError,
    GatewayError,
    KeyProviderUnavailableError,
    KeyUnavailableError,
    PayloadAuthenticationError,
    StoreError,
    StoreUnavailableError,
)

RING = LocalKeyRing({"k1": bytes(range(32))}, "k1")
BINDING = Binding("orders", uuid.UUID(int=5), "mem", "orders/00000000-0000-0000-0000-000000000005")


class Raising(KeyProvider):
    """A user's provider whose client raises ``exc`` (the key ring behind it otherwise)."""

    def __init__(self, exc: BaseException | None = None, unwrapped: Any = None) -> None:
        self.exc = exc
        self.unwrapped = unwrapped

    def new_data_key(self, context: Mapping[str, str]) -> DataKey:
        if self.exc is not None:
            raise self.exc
        return RING.new_data_key(context)

    def unwrap(self, key_id: str, wrapped: bytes, context: Mapping[str, str]) -> bytes:
        if self.exc is not None:
            raise self.exc
        return self.unwrapped if self.unwrapped is not None else RING.unwrap(key_id, wrapped, context)


SEALED = seal(RING, BINDING, b"secret payload")


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionError("[Errno 111] Connection refused: https://vault:s3cr3t@vault.internal:8200"),
        TimeoutError("read timed out"),
        RuntimeError("hsm session closed"),
    ],
)
def test_whatever_a_provider_raises_is_a_transient_provider_error_not_a_store_error(exc: Exception) -> None:
    with pytest.raises(KeyProviderUnavailableError) as opened:
        open_sealed(Raising(exc), SEALED.encryption, BINDING, SEALED.payload)
    error = opened.value
    assert isinstance(error, KeyUnavailableError) and isinstance(error, EncryptionError)
    assert not isinstance(error, StoreError)
    assert error.__cause__ is exc
    assert "key provider Raising failed to unwrap" in str(error) and type(exc).__name__ in str(error)
    assert "s3cr3t" not in str(error), "the client's text (a URL, a token) stays in the cause"
    assert retriable(error)
    with pytest.raises(KeyProviderUnavailableError, match="failed to make a data key"):
        seal(Raising(exc), BINDING, b"x")


def test_the_library_s_own_errors_from_a_provider_pass_unchanged() -> None:
    final = KeyUnavailableError("no key 'k9'")
    with pytest.raises(KeyUnavailableError) as caught:
        open_sealed(Raising(final), SEALED.encryption, BINDING, SEALED.payload)
    assert caught.value is final and not retriable(final)


def test_an_interrupt_in_a_provider_propagates_as_itself() -> None:
    with pytest.raises(KeyboardInterrupt):
        open_sealed(Raising(KeyboardInterrupt()), SEALED.encryption, BINDING, SEALED.payload)


@pytest.mark.parametrize("unwrapped", [b"short", "not bytes", 32])
def test_a_provider_returning_no_data_key_is_a_typed_final_error(unwrapped: Any) -> None:
    with pytest.raises(EncryptionError, match="not a 32-byte data key") as caught:
        open_sealed(Raising(unwrapped=unwrapped), SEALED.encryption, BINDING, SEALED.payload)
    assert not retriable(caught.value)


def test_classification_for_the_retry() -> None:
    assert retriable(KeyProviderUnavailableError("throttled")) and retriable(StoreUnavailableError("down"))
    for final in (KeyUnavailableError("no key"), PayloadAuthenticationError("tag"), EncryptionError("bad key")):
        assert not retriable(final)


def test_a_transient_provider_error_is_retried_under_max_attempts_and_a_final_one_is_not() -> None:
    calls: list[int] = []
    sleeps: list[float] = []

    def unwrap_failing(times: int, error: GatewayError) -> Any:
        def fetch() -> bytes:
            calls.append(1)
            if len(calls) <= times:
                raise error
            return b"payload"

        return fetch

    settings = UnresolvedSettings(ErrorPolicy.SKIP, max_attempts=5, backoff_s=0.1)
    assert attempt(unwrap_failing(4, KeyProviderUnavailableError("vault down")), settings, sleeps.append) == b"payload"
    assert len(calls) == 5 and sleeps == pytest.approx([0.1, 0.2, 0.3, 0.4])
    calls.clear()
    with pytest.raises(KeyUnavailableError):
        attempt(unwrap_failing(9, KeyUnavailableError("no such key")), settings, sleeps.append)
    assert len(calls) == 1


# -- KMS: each answer classified ---------------------------------------------------------------------------------


def kms_client() -> Any:
    return boto3.client("kms", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ThrottlingException", 400, KeyProviderUnavailableError),
        ("LimitExceededException", 400, KeyProviderUnavailableError),
        ("KMSInternalException", 500, KeyProviderUnavailableError),
        ("DependencyTimeoutException", 503, KeyProviderUnavailableError),
        ("KeyUnavailableException", 500, KeyProviderUnavailableError),
        ("SomethingNew", 503, KeyProviderUnavailableError),
        ("SomethingNew", 429, KeyProviderUnavailableError),
        ("NotFoundException", 400, KeyUnavailableError),
        ("DisabledException", 400, KeyUnavailableError),
        ("KMSInvalidStateException", 400, KeyUnavailableError),
        ("AccessDeniedException", 400, KeyUnavailableError),
        ("InvalidGrantTokenException", 400, KeyUnavailableError),
        ("SomethingNew", 400, KeyUnavailableError),
        ("InvalidCiphertextException", 400, PayloadAuthenticationError),
        ("IncorrectKeyException", 400, PayloadAuthenticationError),
    ],
)
def test_kms_error_codes_are_transient_or_final(code: str, status: int, expected: type[GatewayError]) -> None:
    client = kms_client()
    with Stubber(client) as stub:
        stub.add_client_error("decrypt", service_error_code=code, http_status_code=status)
        with pytest.raises(GatewayError) as caught:
            KmsKeyProvider("alias/k", client=client).unwrap("alias/k", b"\0" * 64, {"topic": "t"})
    assert type(caught.value) is expected
    assert retriable(caught.value) == (expected is KeyProviderUnavailableError)
    assert not isinstance(caught.value, StoreError) or expected is PayloadAuthenticationError


class RaisingKmsClient:
    """A KMS client whose calls fail in botocore itself, before any answer from KMS."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def decrypt(self, **_: Any) -> Any:
        raise self.exc

    generate_data_key = decrypt


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (bex.EndpointConnectionError(endpoint_url="https://kms.us-east-1.amazonaws.com"), KeyProviderUnavailableError),
        (bex.ConnectTimeoutError(endpoint_url="https://kms"), KeyProviderUnavailableError),
        (bex.ReadTimeoutError(endpoint_url="https://kms"), KeyProviderUnavailableError),
        (bex.ConnectionClosedError(endpoint_url="https://kms"), KeyProviderUnavailableError),
        (bex.NoCredentialsError(), KeyUnavailableError),
        (bex.NoRegionError(), KeyUnavailableError),
    ],
)
def test_botocore_failures_are_transient_unless_they_are_the_client_s_configuration(
    exc: Exception, expected: type[GatewayError]
) -> None:
    provider = KmsKeyProvider("alias/k", client=RaisingKmsClient(exc))
    for call in (lambda: provider.unwrap("alias/k", b"\0", {}), lambda: provider.new_data_key({})):
        with pytest.raises(GatewayError) as caught:
            call()
        assert type(caught.value) is expected and type(exc).__name__ in str(caught.value)
