"""kafka-hybrid-gateway: Kafka messages of any size, chunked or by reference, chosen per message."""

from gateway.consumer import HybridConsumer
from gateway.errors import (
    DeliveryError,
    GatewayError,
    InvalidSegmentError,
    LargeMessageDroppedError,
    LargeMessageError,
    LargeMessageSendError,
    MessageTooLargeError,
    OffsetNotTrackedError,
    RecordTooLargeError,
)
from gateway.policy import MessageInfo, Policy, Route, RouteKind, SizeThresholdPolicy, TopicOverride
from gateway.producer import HybridProducer

__version__ = "0.1.0"

__all__ = [
    "DeliveryError",
    "GatewayError",
    "HybridConsumer",
    "HybridProducer",
    "InvalidSegmentError",
    "LargeMessageDroppedError",
    "LargeMessageError",
    "LargeMessageSendError",
    "MessageInfo",
    "MessageTooLargeError",
    "OffsetNotTrackedError",
    "Policy",
    "RecordTooLargeError",
    "Route",
    "RouteKind",
    "SizeThresholdPolicy",
    "TopicOverride",
    "__version__",
]
