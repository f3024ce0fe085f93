"""The producer's pure side: the envelope record is built without a Kafka client, a store or a clock."""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

import gateway.core.outgoing
import gateway.core.routes
from gateway.core.outgoing import OutgoingMessage
from gateway.core.routes import envelope_record
from gateway.protocol.envelope import ENVELOPE_HEADER, Envelope, decode_envelope


def test_the_envelope_record_keeps_key_partition_timestamp_and_headers_and_marks_itself_last() -> None:
    message = OutgoingMessage.of("t", b"payload", b"k", 3, None, 1_700, [("app", b"1")])
    envelope = Envelope("redis", "loc-1", 7, b"\x00" * 32, uuid.uuid4())
    record = envelope_record(message, envelope)
    assert record["key"] == b"k" and record["partition"] == 3 and record["timestamp"] == 1_700
    assert [name for name, _ in record["headers"]] == ["app", ENVELOPE_HEADER]
    assert decode_envelope(record["value"]).locator == "loc-1"
    assert "on_delivery" not in record, "the driver adds the callback; the record is data"


def test_a_keyless_message_sends_no_key() -> None:
    record = envelope_record(OutgoingMessage.of("t", b"v"), Envelope("redis", "l", 1, b"\x00" * 32, uuid.uuid4()))
    assert "key" not in record


def test_the_producers_pure_modules_import_no_client_and_no_store() -> None:
    for module in (gateway.core.routes, gateway.core.outgoing):
        tree = ast.parse(Path(str(module.__file__)).read_text())
        imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {
            m for m in imported if m.startswith(("confluent_kafka", "gateway.producer", "gateway.store", "stores"))
        }
