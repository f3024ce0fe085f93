"""The producer's pure decisions: what record a reference message becomes.

Sans-IO, like the rest of :mod:`gateway.core`: no Kafka client, no store, no clock. The producer's
writers act on what these functions return (:mod:`gateway.producer.reference.writer` queues the
record this module builds), so the record's shape is decided in one place and unit-tested alone.
"""

from __future__ import annotations

from typing import Any

from gateway.core.outgoing import OutgoingMessage
from gateway.protocol.envelope import Envelope, encode_envelope, envelope_header
from gateway.protocol.headers import Headers
from gateway.protocol.peers.pointer_formats import ReferenceFormat, pointer_record


def envelope_record(
    message: OutgoingMessage, envelope: Envelope, form: ReferenceFormat = ReferenceFormat.GATEWAY
) -> dict[str, Any]:
    """``produce``'s keyword arguments for ``message``'s envelope, less ``on_delivery``.

    Key, partition and timestamp are the message's own, and its headers come first with the
    envelope's marker last, so a consumer that does not resolve references still sees the caller's.
    With a peer's ``reference.format`` the record is instead the pointer bakdata's or AWS's reader
    follows to the same object (its marks in place of the envelope's).
    """
    value = encode_envelope(envelope)
    marks: Headers = [envelope_header()]
    if form.pointer:
        pointer = pointer_record(form, envelope.locator)
        value, marks = pointer.value, pointer.headers
    record: dict[str, Any] = {
        "value": value,
        "partition": message.partition,
        "timestamp": message.timestamp,
        "headers": [*message.header_list, *marks],
    }
    if message.key is not None:
        record["key"] = message.key
    return record


__all__ = ["envelope_record"]
