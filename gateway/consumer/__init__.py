"""The consumer: ``HybridConsumer``, its configuration, and the payload fetching it drives."""

from gateway.consumer._hybrid_consumer import HybridConsumer

__all__ = ["HybridConsumer"]
