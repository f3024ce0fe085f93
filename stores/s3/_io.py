"""The boto3 plumbing under :class:`~stores.S3Store`: what a failed request means, and reading a body once.

A failure the producer may wait out (5xx, throttling, an unreachable endpoint) is
:class:`StoreUnavailableError`, so its policy can fall back to chunking; a refusal that will not
pass is :class:`StoreError`; a missing object on a read is :class:`PayloadNotFoundError`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from botocore import exceptions as bex

from gateway.core.buffers import BytesBuilder
from gateway.errors import PayloadNotFoundError, StoreError, StoreUnavailableError
from stores.base import StoreMetrics

_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})
_RETRY_LATER = frozenset({
    "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "RequestTimeTooSkewed", "Throttling",
})  # fmt: skip
_T = TypeVar("_T")


def mapped_errors(metrics: StoreMetrics, fn: Callable[[], _T], missing: str | None = None) -> _T:
    """``fn()``, with botocore's errors counted and raised as the gateway's typed store errors.

    ``missing`` names what a GET was for: a missing key is then :class:`PayloadNotFoundError`.
    """
    try:
        return fn()
    except bex.ClientError as exc:
        if missing is not None and code(exc) in _NOT_FOUND:
            metrics.add("not_found")
            raise PayloadNotFoundError(f"no object at {missing!r}") from exc
        raise failed(metrics, exc) from exc
    except (bex.BotoCoreError, OSError) as exc:
        raise failed(metrics, exc) from exc
    except Exception as exc:  # boto3's S3UploadFailedError and s3transfer's wrappers
        if type(exc).__module__.startswith(("boto3", "s3transfer")):
            raise failed(metrics, exc) from exc
        raise


def translate(exc: BaseException) -> StoreError:
    """Unavailable (so the producer may fall back) for what may pass: 5xx, throttling, the network."""
    if isinstance(exc, bex.ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if status >= 500 or code(exc) in _RETRY_LATER:
            return StoreUnavailableError(f"S3 is failing: {exc}")
        return StoreError(f"S3 refused the request: {exc}")
    if isinstance(exc, bex.SSLError):
        return StoreUnavailableError(
            f"S3 endpoint TLS failed (give the endpoint's CA bundle: boto3 verify=, s3.ca.bundle): {exc}"
        )
    if isinstance(exc, (bex.ConnectionError, bex.HTTPClientError, bex.IncompleteReadError, OSError)):
        return StoreUnavailableError(f"S3 endpoint unreachable: {exc}")
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not exc and isinstance(cause, (bex.BotoCoreError, bex.ClientError, OSError)):
        return translate(cause)
    return StoreError(f"S3 error: {exc}")


def failed(metrics: StoreMetrics, exc: BaseException) -> StoreError:
    metrics.add("errors")
    return translate(exc)


def code(exc: bex.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def sends_checksums(client: Any) -> bool:
    config = getattr(getattr(client, "meta", None), "config", None)
    return getattr(config, "request_checksum_calculation", "when_supported") == "when_supported"


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


_READ_CHUNK = 1 << 20


def read_body(body: Any, length: int) -> bytes:
    """The body read straight into the value in 1 MiB steps: one copy of the payload, not a copy plus its pieces.

    ``length`` is the Content-Length; a body that ends early or runs long is reported by the
    caller's length check (whatever was read is returned).
    """
    if length < 2:
        data: bytes = body.read()
        return data
    builder = BytesBuilder(length)
    extra: list[bytes] = []
    while True:
        chunk = body.read(_READ_CHUNK)
        if not chunk:
            break
        if builder.filled + len(chunk) <= length and not extra:
            builder.append(chunk)
        else:
            extra.append(chunk)
    if builder.filled == length and not extra:
        return builder.build()
    return b"".join([builder.partial(), *extra])  # the wrong size: the caller refuses it with the numbers
