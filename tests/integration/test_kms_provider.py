"""AWS KMS as the key provider, against moto's KMS in the same server process as the S3 tests."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from gateway.encryption import Binding, KmsKeyProvider, open_sealed, seal
from gateway.errors import KeyUnavailableError, PayloadAuthenticationError
from gateway.protocol.envelope import Envelope, decode_envelope, encode_envelope
from gateway.testing import S3Server

BINDING = Binding("orders", uuid.UUID(int=5), "s3", "s3://b/gw/orders/00000000-0000-0000-0000-000000000005")


@pytest.fixture(scope="module")
def kms(s3_server: S3Server) -> Any:
    if s3_server.external:
        pytest.skip("KMS tests run against moto's server only, never an account")
    return s3_server.kms_client()


@pytest.fixture
def key_arn(kms: Any) -> str:
    return str(kms.create_key(Description="gateway test")["KeyMetadata"]["Arn"])


def test_a_payload_sealed_under_kms_opens_with_kms_and_the_envelope_stays_small(kms: Any, key_arn: str) -> None:
    provider = KmsKeyProvider(key_arn, client=kms)
    sealed = seal(provider, BINDING, b"card 4111 1111 1111 1111" * 1000)
    assert sealed.encryption.key_id == key_arn
    assert b"4111" not in sealed.payload
    envelope = Envelope.for_payload(
        sealed.payload, store="s3", locator=BINDING.locator, message_id=BINDING.message_id, encryption=sealed.encryption
    )
    value = encode_envelope(envelope)
    assert len(value) < 600, len(value)
    decoded = decode_envelope(value)
    assert decoded.encryption is not None
    assert (
        bytes(open_sealed(provider, decoded.encryption, BINDING, sealed.payload)) == b"card 4111 1111 1111 1111" * 1000
    )


def test_kms_refuses_a_wrapped_key_moved_to_another_record(kms: Any, key_arn: str) -> None:
    provider = KmsKeyProvider(key_arn, client=kms)
    sealed = seal(provider, BINDING, b"x")
    moved = Binding("payments", BINDING.message_id, BINDING.store, BINDING.locator)
    with pytest.raises(PayloadAuthenticationError, match="KMS Decrypt refused"):
        open_sealed(provider, sealed.encryption, moved, sealed.payload)


def test_an_envelope_naming_a_key_kms_lacks_is_a_typed_error_naming_the_key(kms: Any, key_arn: str) -> None:
    import dataclasses

    provider = KmsKeyProvider(key_arn, client=kms)
    sealed = seal(provider, BINDING, b"x")
    missing = key_arn.rsplit("/", 1)[0] + "/" + str(uuid.UUID(int=1))
    encryption = dataclasses.replace(sealed.encryption, key_id=missing)
    with pytest.raises(KeyUnavailableError, match="NotFound") as caught:
        open_sealed(provider, encryption, BINDING, sealed.payload)
    assert missing in str(caught.value)


def test_an_unknown_key_and_an_unreachable_kms_are_typed_errors(kms: Any) -> None:
    import boto3
    from botocore.config import Config

    with pytest.raises(KeyUnavailableError, match="NotFound"):
        KmsKeyProvider("alias/nobody", client=kms).new_data_key({})
    unreachable = boto3.client(
        "kms",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="AKIAKNOWNSECRET",
        aws_secret_access_key="known-secret-access-key",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    provider = KmsKeyProvider("alias/x", client=unreachable)
    with pytest.raises(KeyUnavailableError, match="EndpointConnectionError") as caught:
        provider.new_data_key({})
    assert "known-secret-access-key" not in str(caught.value) + repr(provider)
