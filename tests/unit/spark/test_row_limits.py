"""The Spark source and sink refuse a payload a row cannot carry, naming the limit and the streaming API."""

from __future__ import annotations

import pytest

from gateway.errors import PayloadTooLargeError
from gateway.spark.row_limits import MAX_ROW_VALUE_BYTES, check_row_value


def test_a_value_below_the_row_limit_passes() -> None:
    check_row_value(MAX_ROW_VALUE_BYTES - 1, "t[0] offset 5")


def test_a_value_at_the_row_limit_is_refused_with_the_limit_and_the_streaming_api() -> None:
    with pytest.raises(PayloadTooLargeError) as caught:
        check_row_value(MAX_ROW_VALUE_BYTES, "t[0] offset 5")
    text = str(caught.value)
    assert str(MAX_ROW_VALUE_BYTES) in text and "t[0] offset 5" in text
    assert "value.stream.threshold.bytes" in text and "PayloadStream" in text and "produce_stream" in text


def test_the_source_gives_a_too_large_envelope_the_refusal_in_its_error_column_without_reading_it() -> None:
    import uuid

    from gateway.consumer.fetch_ahead import ReferenceFetcher
    from gateway.consumer.resolver import Resolver
    from gateway.core.events import ReferenceToResolve
    from gateway.protocol.envelope import Envelope
    from gateway.protocol.records import Record, RouteKind
    from gateway.spark.reading import _resolve
    from gateway.testing.memory_store import RangingMemoryStore

    store = RangingMemoryStore()
    envelope = Envelope(store.name, "t/" + str(uuid.uuid4()), MAX_ROW_VALUE_BYTES, bytes(32), uuid.uuid4())
    message = ReferenceToResolve(Record(5, b"k", None, None), None, None, RouteKind.REFERENCE, 5, 6, envelope=envelope)
    refs = ReferenceFetcher(Resolver({store.name: store}))
    _, value, error = _resolve(message, refs, "t", 0, False)
    assert value is None and error is not None and "value.stream.threshold.bytes" in error
    assert store.calls == []
