"""The producer: ``HybridProducer`` and what it drives (chunked writer, reference writer, queue-full wait)."""

from gateway.producer._delivery_error import delivery_error
from gateway.producer._hybrid_producer import HybridProducer, KafkaError, KafkaException

__all__ = ["HybridProducer", "KafkaError", "KafkaException", "delivery_error"]
