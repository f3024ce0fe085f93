"""AWS KMS as the key provider: ``GenerateDataKey`` per payload, ``Decrypt`` per read, both with an encryption context.

The KMS key never leaves KMS; what the envelope carries is KMS's ``CiphertextBlob`` (about 190
bytes) and the key's ARN. The encryption context (the record's topic and message id) is checked by
KMS on ``Decrypt`` and appears in CloudTrail, so an auditor sees which record every decryption was for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.encryption._provider import DataKey, KeyProvider
from gateway.errors import KeyProviderUnavailableError, KeyUnavailableError, PayloadAuthenticationError

_FORGED = frozenset({"InvalidCiphertextException", "IncorrectKeyException"})
"""KMS's answers for a wrapped key not genuine for the context: final, an attack more likely than a fault."""
_TRANSIENT = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "LimitExceededException",
        "KMSInternalException",
        "InternalFailure",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "DependencyTimeoutException",
        "KeyUnavailableException",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
"""KMS's error codes that may answer differently a moment later: throttling, KMS's own faults, and
``KeyUnavailableException`` (KMS's name for a key it cannot use just now). Every other code (no such
key, key disabled or pending deletion, access denied, invalid grant) is final; so is an HTTP 4xx
with a code not listed, while any 5xx or 429 is transient."""


class KmsKeyProvider(KeyProvider):
    """Data keys from AWS KMS under ``key_id`` (a key id, ARN or alias); any key KMS lets us use decrypts.

    ``client`` is a boto3 KMS client; without one, one is made from ``client_kwargs`` (region,
    endpoint, credentials as boto3 finds them). ``repr`` shows the key id, never credentials.
    """

    def __init__(self, key_id: str, *, client: Any = None, **client_kwargs: Any) -> None:
        if client is None:
            import boto3

            client = boto3.client("kms", **client_kwargs)
        self.key_id = key_id
        self.client = client

    def __repr__(self) -> str:
        return f"KmsKeyProvider(key_id={self.key_id!r})"

    def new_data_key(self, context: Mapping[str, str]) -> DataKey:
        reply = self._call(
            "GenerateDataKey", self.key_id, KeyId=self.key_id, KeySpec="AES_256", EncryptionContext=dict(context)
        )
        return DataKey(str(reply["KeyId"]), bytes(reply["Plaintext"]), bytes(reply["CiphertextBlob"]))

    def unwrap(self, key_id: str, wrapped: bytes, context: Mapping[str, str]) -> bytes:
        reply = self._call("Decrypt", key_id, CiphertextBlob=wrapped, KeyId=key_id, EncryptionContext=dict(context))
        return bytes(reply["Plaintext"])

    def _call(self, operation: str, key_id: str, **kwargs: Any) -> Any:
        """One KMS call; its failures as typed errors that name the key and KMS's error code, not the request.

        Transient failures (:data:`_TRANSIENT`, a 5xx or 429, the network) are
        :class:`KeyProviderUnavailableError`, retried by the consumer; the rest are final.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        method = self.client.generate_data_key if operation == "GenerateDataKey" else self.client.decrypt
        try:
            return method(**kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "unknown"))
            if code in _FORGED:
                raise PayloadAuthenticationError(
                    f"KMS {operation} refused the wrapped data key of {key_id!r} ({code}):"
                    " the envelope was altered, moved to another record, or wrapped under another key"
                ) from None
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            transient = code in _TRANSIENT or status == 429 or (isinstance(status, int) and status >= 500)
            failed = KeyProviderUnavailableError if transient else KeyUnavailableError
            raise failed(f"KMS {operation} with key {key_id!r} failed: {code}") from None
        except BotoCoreError as exc:
            failed = KeyUnavailableError if _configuration(exc) else KeyProviderUnavailableError
            raise failed(f"KMS {operation} with key {key_id!r} failed: {type(exc).__name__}") from None

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if close is not None:
            close()


def _configuration(exc: BaseException) -> bool:
    """Whether a botocore error is the client's configuration (credentials, region, parameters): final.

    Every other ``BotoCoreError`` is the network (endpoint unreachable, connection closed, connect or
    read timeout): transient.
    """
    from botocore import exceptions as bex

    return isinstance(
        exc, (bex.NoCredentialsError, bex.PartialCredentialsError, bex.NoRegionError, bex.ParamValidationError)
    )
