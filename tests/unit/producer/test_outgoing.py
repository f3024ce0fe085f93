"""``produce``'s arguments are checked, and converted once, before any route writes anything."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core.outgoing import RESERVED_HEADERS, OutgoingMessage
from gateway.errors import ConfigurationError, PayloadNotFoundError
from gateway.store import checked_stores
from gateway.testing.memory_store import MemoryStore


def test_good_arguments_are_kept_as_given_and_converted_once() -> None:
    m = OutgoingMessage.of("t", "välue", key="k", partition=2, timestamp=5, headers={"h": "v", "n": None})
    assert (m.value, m.payload, m.key, m.key_bytes, m.partition) == ("välue", "välue".encode(), "k", b"k", 2)
    assert m.headers == {"h": "v", "n": None} and m.header_list == [("h", b"v"), ("n", None)]
    m.header_list.append(("x", b"y"))
    assert m.header_list == [("h", b"v"), ("n", None)], "each call gives a fresh list"


@pytest.mark.parametrize("headers", [[("h", 5)], {"h": 5}, [("h", b"ok"), ("bad", object())]])
def test_a_header_value_that_is_not_bytes_or_text_is_a_type_error_naming_it(headers: Any) -> None:
    with pytest.raises(TypeError, match=r"header '(h|bad)' must be bytes or str"):
        OutgoingMessage.of("t", b"v", headers=headers)


@pytest.mark.parametrize("headers", ["h=v", 7, [("only-a-name",)], [["h", b"v"]]])
def test_headers_of_the_wrong_shape_are_a_type_error(headers: Any) -> None:
    with pytest.raises(TypeError, match="headers must be"):
        OutgoingMessage.of("t", b"v", headers=headers)


@pytest.mark.parametrize("name", sorted(RESERVED_HEADERS))
def test_reserved_header_names_are_refused(name: str) -> None:
    assert {"_gw.ref", "_lm", "_t", "_so"} == RESERVED_HEADERS
    with pytest.raises(ConfigurationError, match="reserved") as info:
        OutgoingMessage.of("t", b"v", headers=[("ok", b"1"), (name, b"\x00")])
    assert name in str(info.value)


def test_a_key_that_is_not_bytes_or_text_is_a_type_error_naming_the_key() -> None:
    with pytest.raises(TypeError, match="key must be bytes or str"):
        OutgoingMessage.of("t", b"v", key=5)


@pytest.mark.parametrize("partition", [-2, -5])
def test_a_negative_partition_other_than_any_is_refused(partition: int) -> None:
    with pytest.raises(ConfigurationError, match=f"partition must be -1 .* got {partition}"):
        OutgoingMessage.of("t", b"v", partition=partition)


@pytest.mark.parametrize("partition", ["1", 1.0, True, None])
def test_a_partition_that_is_not_an_int_is_a_type_error(partition: Any) -> None:
    with pytest.raises(TypeError, match="partition must be an int"):
        OutgoingMessage.of("t", b"v", partition=partition)


@pytest.mark.parametrize("on_delivery", [42, "cb", b"x"])
def test_an_on_delivery_that_cannot_be_called_is_a_type_error(on_delivery: Any) -> None:
    with pytest.raises(TypeError, match="on_delivery must be callable"):
        OutgoingMessage.of("t", b"v", on_delivery=on_delivery)


@pytest.mark.parametrize("topic", ["", None, b"t", 3])
def test_a_topic_that_is_not_a_name_is_a_type_error(topic: Any) -> None:
    with pytest.raises(TypeError, match="topic must be"):
        OutgoingMessage.of(topic, b"v")


def test_a_timestamp_that_is_not_an_int_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="timestamp must be an int"):
        OutgoingMessage.of("t", b"v", timestamp="now")


def test_stores_must_be_a_mapping_of_names_to_stores() -> None:
    store = MemoryStore()
    assert checked_stores(None) == {} and checked_stores({"mem": store}) == {"mem": store}
    with pytest.raises(TypeError, match="stores must be a mapping"):
        checked_stores("redis")
    with pytest.raises(TypeError, match=r"stores\['redis'\] is not a store: NoneType does not subclass stores.Store"):
        checked_stores({"redis": None})

    class DuckTyped:  # has every method, but does not declare the contract: its optional features are unknown
        def put(self, *args: object) -> str:
            return ""

        get = delete = put

    with pytest.raises(TypeError, match=r"DuckTyped does not subclass stores\.Store"):
        checked_stores({"duck": DuckTyped()})
    with pytest.raises(TypeError, match="names must be str"):
        checked_stores({1: store})


def test_the_reference_store_declares_only_what_every_store_must_and_gets_the_defaults() -> None:
    """What a store without the optional features does: the answers the producer, consumer and gc rely on."""
    store = MemoryStore()
    assert store.put_pipeline() is None and store.journalled_in_batch("t/x") is False
    assert store.list_incomplete_uploads(2**62) == [] and store.reads_in_groups is False
    assert store.needs_digest_to_write is True
    assert store.next_message_id("t", 0) != store.next_message_id("t", 0)
    one = store.put("t", store.next_message_id("t", 0), b"one", pending_since_ms=5)
    store.clear_pending_many([one])
    assert store.list_pending(2**62) == [] and store.calls == ["put", "clear_pending"]
    gone = "t/00000000-0000-0000-0000-000000000000"
    [value, error] = store.get_many([(one, 3), (gone, None)])
    assert value == b"one" and isinstance(error, PayloadNotFoundError)
