"""kafka-hybrid-gateway: Kafka messages of any size, chunked or by reference, chosen per message.

Every error the library raises on purpose is importable from here, so an application catches
``gateway.StoreUnavailableError`` without learning the module layout.
"""

from gateway.consumer import HybridConsumer
from gateway.errors import (
    ConfigurationError,
    DeliveryError,
    EncryptionError,
    EnvelopeFormatError,
    EnvelopePayloadError,
    FallbackRefusedError,
    GatewayError,
    HeaderFormatError,
    InvalidSegmentError,
    KeyProviderUnavailableError,
    KeyUnavailableError,
    LargeMessageDroppedError,
    LargeMessageError,
    LargeMessageSendError,
    LocatorError,
    LocatorTopicError,
    MessageTooLargeError,
    MissingExtraError,
    OffsetNotTrackedError,
    PayloadAuthenticationError,
    PayloadIntegrityError,
    PayloadNotFoundError,
    PayloadTooLargeError,
    PeerFormatError,
    ProtocolError,
    RecordTooLargeError,
    StoreError,
    StoreNotConfiguredError,
    StoreUnavailableError,
)
from gateway.policy import MessageInfo, Policy, Route, RouteKind, SizeThresholdPolicy, TopicOverride
from gateway.producer import HybridProducer

__version__ = "0.1.0"

__all__ = [
    "ConfigurationError",
    "DeliveryError",
    "EncryptionError",
    "EnvelopeFormatError",
    "EnvelopePayloadError",
    "FallbackRefusedError",
    "GatewayError",
    "HeaderFormatError",
    "HybridConsumer",
    "HybridProducer",
    "InvalidSegmentError",
    "KeyProviderUnavailableError",
    "KeyUnavailableError",
    "LargeMessageDroppedError",
    "LargeMessageError",
    "LargeMessageSendError",
    "LocatorError",
    "LocatorTopicError",
    "MessageInfo",
    "MessageTooLargeError",
    "MissingExtraError",
    "OffsetNotTrackedError",
    "PayloadAuthenticationError",
    "PayloadIntegrityError",
    "PayloadNotFoundError",
    "PayloadTooLargeError",
    "PeerFormatError",
    "Policy",
    "ProtocolError",
    "RecordTooLargeError",
    "Route",
    "RouteKind",
    "SizeThresholdPolicy",
    "StoreError",
    "StoreNotConfiguredError",
    "StoreUnavailableError",
    "TopicOverride",
    "__version__",
]
