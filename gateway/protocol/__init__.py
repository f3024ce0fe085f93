"""Sans-IO wire formats: LinkedIn's segment protocol and our reference envelope.

Nothing here opens a socket, starts a thread or reads a clock; it turns bytes into typed values
and back, so it can be tested exhaustively and reused by the producer, consumer and Spark source.
"""

from gateway.protocol.classify import RecordKind, classify
from gateway.protocol.headers import (
    LM_HEADER,
    SAFE_OFFSET_HEADER,
    TIMESTAMP_HEADER,
    LargeMessageHeader,
    LmType,
    decode_lm,
    delivered_lm,
    encode_delivered_lm,
    encode_lm,
)
from gateway.protocol.metadata import offset_from_metadata, user_metadata_from, wrap_metadata
from gateway.protocol.records import OutRecord, Record, TopicPartitionKey
from gateway.protocol.segments import SEGMENT_HEADER_SIZE, Segment, decode_segment, encode_segment
from gateway.protocol.splitter import split

__all__ = [
    "LM_HEADER",
    "SAFE_OFFSET_HEADER",
    "SEGMENT_HEADER_SIZE",
    "TIMESTAMP_HEADER",
    "LargeMessageHeader",
    "LmType",
    "OutRecord",
    "Record",
    "RecordKind",
    "Segment",
    "TopicPartitionKey",
    "classify",
    "decode_lm",
    "decode_segment",
    "delivered_lm",
    "encode_delivered_lm",
    "encode_lm",
    "encode_segment",
    "offset_from_metadata",
    "split",
    "user_metadata_from",
    "wrap_metadata",
]
