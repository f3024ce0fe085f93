"""The largest value a Spark row carries through the source and the sink, and the refusal that names the way out.

A row's ``value`` is one JVM ``byte[]`` (at most ``2**31 - 1`` bytes less the array header) and one
Arrow/pickle buffer on its way to and from Python: a payload near that size cannot be a row whatever
the memory. Streams do not fit a row either (a DataFrame column is a value, not a reader), so the
source and the sink refuse such payloads by name and point at the streaming API of the clients:
``HybridConsumer`` with ``value.stream.threshold.bytes`` (a ``gateway.PayloadStream``) and
``HybridProducer.produce_stream``. Pure.
"""

from __future__ import annotations

from gateway.errors import PayloadTooLargeError

MAX_ROW_VALUE_BYTES = 2_000_000_000
"""The largest row value the Spark source hands out and the sink takes (the consumer's default
``reference.max.payload.bytes`` too), comfortably below the JVM's array limit."""


def check_row_value(size: int, where: str) -> None:
    """:class:`PayloadTooLargeError` for a value of ``size`` bytes at or above :data:`MAX_ROW_VALUE_BYTES`."""
    if size >= MAX_ROW_VALUE_BYTES:
        raise PayloadTooLargeError(
            f"{where}: a payload of {size} bytes is at or above the Spark row limit of {MAX_ROW_VALUE_BYTES} bytes"
            " (one JVM byte[] per value): read it with HybridConsumer and value.stream.threshold.bytes"
            " (a gateway.PayloadStream), write it with HybridProducer.produce_stream"
        )


__all__ = ["MAX_ROW_VALUE_BYTES", "check_row_value"]
