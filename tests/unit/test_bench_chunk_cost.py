"""``benchmarks.chunk_cost``: its raw variants send the records the chunked route writes (no broker, nothing timed).

The decomposition is only worth reading if ``raw+build`` moves what ``HybridProducer`` moves: same
segment count and sizes, same chunks, keys, partitions and header names; only the message id and
the timestamp differ from run to run.
"""

from __future__ import annotations

from typing import Any

from benchmarks import chunk_cost, variants
from gateway.core.outgoing import OutgoingMessage
from gateway.producer._chunked_writer import ChunkedWriter
from gateway.producer._config import parse_producer_config
from gateway.protocol.segments import SEGMENT_HEADER_SIZE, decode_segment


def _gateway_records(value: bytes, key: bytes) -> list[dict[str, Any]]:
    settings, _ = parse_producer_config(
        {
            "bootstrap.servers": "unused:9092",
            "message.max.bytes": variants.CHUNK_MESSAGE_MAX,  # the route suite's producer
            "max.message.segment.bytes": variants.SEGMENT,
        }
    )
    sent: list[dict[str, Any]] = []
    writer = ChunkedWriter(settings, lambda topic, kwargs: sent.append(kwargs))
    writer.send(OutgoingMessage.of("t", value, key=key, partition=0))
    return sent


def test_raw_build_sends_the_chunked_routes_records() -> None:
    value = bytes(range(256)) * 3907  # 1 000 192 bytes: two segments, the second short
    ours = list(chunk_cost._segments("t", b"k0000001", value))
    theirs = _gateway_records(value, b"k0000001")
    assert len(ours) == len(theirs) == 2
    for mine, gateway in zip(ours, theirs, strict=True):
        assert len(mine["value"]) == len(gateway["value"])
        assert mine["value"][SEGMENT_HEADER_SIZE:] == gateway["value"][SEGMENT_HEADER_SIZE:]
        a, b = decode_segment(mine["value"]), decode_segment(gateway["value"])
        assert a is not None and b is not None
        assert (a.sequence_number, a.number_of_segments, a.message_size) == (
            b.sequence_number,
            b.number_of_segments,
            b.message_size,
        )
        assert (mine["key"], mine["partition"]) == (gateway["key"], gateway["partition"])
        assert [name for name, _ in mine["headers"]] == [name for name, _ in gateway["headers"]]
