"""asyncio clients: :class:`AIOHybridProducer` and :class:`AIOHybridConsumer`, after ``confluent_kafka.aio``.

Each wraps the synchronous client and runs every call that may block (store writes and reads,
librdkafka's polls and flushes, queue-full retries) on a worker thread, so the event loop never
waits on I/O. The wrapped client is driven from one thread at a time (its bookkeeping is not
shared between threads), which also keeps delivery reports in the order librdkafka serves them.

``await producer.produce(...)`` resolves with the delivered message (the record that completes it)
once the *whole* logical message is delivered; a failed delivery raises ``KafkaException`` with the
``KafkaError`` ``on_delivery`` gets (every route). The message is awaitable and gives itself, so
``confluent_kafka.aio.AIOProducer``'s two-step (``fut = await producer.produce(...); msg = await fut``)
works as well.

Cancelling a call loses nothing: a ``poll``/``consume`` cancelled after its worker got messages
hands them out on the next call and no commit covers them before (:mod:`gateway.consumer.handoff`); a
``produce`` the worker took completes. docs/asyncio.md states the guarantees.
"""

from gateway.aio.clients import AIOHybridConsumer, AIOHybridProducer

__all__ = ["AIOHybridConsumer", "AIOHybridProducer"]
