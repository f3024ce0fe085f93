"""The two asyncio clients; see :mod:`gateway.aio`."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Generator, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, Message

from gateway.aio._streams import CancellableSource
from gateway.consumer import HybridConsumer
from gateway.consumer.handoff import PendingDelivery
from gateway.encryption import KeyProvider
from gateway.policy import Policy, Router
from gateway.producer import HybridProducer, delivery_error
from gateway.store import Store

if TYPE_CHECKING:
    from typing_extensions import Self

POLL_INTERVAL_S = 0.01
"""How long each poll for delivery reports may hold the worker thread while messages are in flight."""


class _Driven:
    """A synchronous client driven from one worker thread, called from the event loop."""

    def __init__(self, executor: Executor | None, name: str) -> None:
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(1, thread_name_prefix=name)
        self.executor = self._executor
        """The executor the calls run on, under confluent_kafka.aio's name."""

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    _client: Any

    async def close(self) -> None:
        """Close the wrapped client (a producer flushes first) on the worker, then the worker itself."""
        await self._call(self._client.close)
        if self._own_executor:
            self._executor.shutdown(wait=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


def _delegating(name: str) -> Callable[..., Any]:
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await self._call(getattr(self._client, name), *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``{name}`` of the wrapped client, on its worker thread."
    return method


class AIOHybridProducer(_Driven):
    """``HybridProducer`` for asyncio: ``msg = await producer.produce(topic, value, key)``.

    confluent-kafka's two-step works too: ``fut = await producer.produce(...)`` then ``msg = await fut``
    (the delivered message is awaitable and gives itself). ``max_workers``, ``batch_size`` and
    ``buffer_timeout`` are accepted for ``confluent_kafka.aio.AIOProducer``'s signature: one worker
    drives the client and each ``produce`` is queued at once, so there is no buffer to size or time
    out (docs/migration.md).
    """

    def __init__(
        self,
        producer_conf: Mapping[str, Any],
        policy: Policy | Router | None = None,
        stores: Mapping[str, Store] | None = None,
        *,
        max_workers: int = 1,
        executor: Executor | None = None,
        batch_size: int = 1000,
        buffer_timeout: float = 1.0,
        key_provider: KeyProvider | None = None,
    ) -> None:
        if max_workers < 1 or batch_size < 1 or buffer_timeout < 0:
            raise ValueError(
                f"max_workers and batch_size must be at least 1 and buffer_timeout at least 0, got {max_workers}, "
                f"{batch_size} and {buffer_timeout}"
            )
        super().__init__(executor, "gateway-aio-producer")
        self._client: HybridProducer = HybridProducer(
            producer_conf, policy=policy, stores=stores, key_provider=key_provider
        )
        self._waiting = 0
        self._poller: asyncio.Task[None] | None = None

    @property
    def inner(self) -> HybridProducer:
        return self._client

    async def produce(self, topic: str, value: Any = None, key: Any = None, *args: Any, **kwargs: Any) -> Message:
        """Resolves with the delivered message once all of it is in Kafka; raises ``KafkaException`` otherwise."""
        return await self._delivered(self._client.produce, (topic, value, key, *args), kwargs)

    async def produce_stream(
        self, topic: str, source: Any, size: int, key: Any = None, *args: Any, **kwargs: Any
    ) -> Message:
        """``HybridProducer.produce_stream`` on the worker thread, resolving as :meth:`produce` does.

        ``source`` is a readable binary file, an iterable of bytes-like chunks, or an async iterable
        of them (read on the event loop, a chunk at a time, as the worker asks). Cancelled (a
        timeout included) while the source is still read, the upload is rolled back: the source's
        next read stops it, the store aborts it and removes the pending mark, and nothing reaches
        Kafka; the call raises ``CancelledError`` once that is done. Cancelled after the source's end,
        the message is delivered whole, as a cancelled :meth:`produce` is.
        """
        wrapped = CancellableSource(source, asyncio.get_running_loop())
        return await self._delivered(
            self._client.produce_stream, (topic, wrapped.for_worker(), size, key, *args), kwargs, wrapped.cancel
        )

    async def _delivered(
        self,
        send: Callable[..., None],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        on_cancel: Callable[[], None] | None = None,
    ) -> Message:
        """``send`` on the worker with a callback settling the returned future; then that future, awaited."""
        loop = asyncio.get_running_loop()
        delivered: asyncio.Future[Message] = loop.create_future()
        user_callback = kwargs.pop("on_delivery", None) or kwargs.pop("callback", None)

        def report(err: Any, msg: Any) -> None:  # on the worker thread, inside poll/flush
            if user_callback is not None:
                user_callback(err, msg)
            loop.call_soon_threadsafe(_settle, delivered, err, msg)

        if on_cancel is None:
            await self._call(send, *args, on_delivery=report, **kwargs)
        else:
            await self._until_done(self._call(send, *args, on_delivery=report, **kwargs), on_cancel)
        self._waiting += 1
        self._ensure_poller()
        try:
            return await delivered
        finally:
            self._waiting -= 1

    @staticmethod
    async def _until_done(call: Awaitable[Any], on_cancel: Callable[[], None]) -> None:
        """``call``; cancelled, ``on_cancel`` stops it and the cancellation is raised once the worker is done."""
        running = asyncio.ensure_future(call)
        try:
            await asyncio.shield(running)
        except asyncio.CancelledError:
            on_cancel()
            await asyncio.wait({running})  # the worker rolls the upload back (or had queued the envelope)
            if not running.cancelled():
                running.exception()  # retrieved: the cancellation is what the caller gets
            raise

    def _ensure_poller(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll_while_waiting())

    async def _poll_while_waiting(self) -> None:
        while self._waiting > 0:
            await self._call(self._client.poll, POLL_INTERVAL_S)
            await asyncio.sleep(0)


class DeliveredMessage(Message):
    """The delivered message, awaitable as confluent-kafka's ``AIOProducer.produce`` result is.

    ``await producer.produce(...)`` gives it, and awaiting it again gives itself, so both
    ``msg = await producer.produce(...)`` and confluent's ``fut = await producer.produce(...); msg = await fut``
    hold the delivered message.
    """

    def __await__(self) -> Generator[Any, None, DeliveredMessage]:
        return self
        yield  # a generator that returns at once

    @classmethod
    def of(cls, msg: Any) -> Any:
        """A copy of librdkafka's delivered ``msg``; anything else, or a copy that fails, stays as it was."""
        if not isinstance(msg, Message):
            return msg
        fields: dict[str, Any] = {
            "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(), "key": msg.key(),
            "value": msg.value(), "headers": msg.headers(), "error": msg.error(), "timestamp": msg.timestamp(),
            "latency": msg.latency(), "leader_epoch": msg.leader_epoch(),
        }  # fmt: skip
        try:  # Message() refuses None for some fields (latency, leader_epoch): those are left out
            return cls(**{name: value for name, value in fields.items() if value is not None})
        except (TypeError, ValueError):
            return msg


def _settle(future: asyncio.Future[Message], err: Any, msg: Any) -> None:
    if future.done():
        return
    if err is not None:
        future.set_exception(KafkaException(delivery_error(err)))  # as confluent_kafka.aio raises it, on every route
    else:
        future.set_result(DeliveredMessage.of(msg))


_PRODUCER_CALLS = (
    "flush",
    "poll",
    "purge",
    "list_topics",
    "cluster_id",
    "set_sasl_credentials",
    "init_transactions",
    "begin_transaction",
    "commit_transaction",
    "abort_transaction",
    "send_offsets_to_transaction",
    "produce_batch",
)
for _name in _PRODUCER_CALLS:
    setattr(AIOHybridProducer, _name, _delegating(_name))


class AIOHybridConsumer(_Driven):
    """``HybridConsumer`` for asyncio: ``await consumer.subscribe([topic]); msg = await consumer.poll(1.0)``."""

    def __init__(
        self,
        consumer_conf: Mapping[str, Any],
        stores: Mapping[str, Store] | None = None,
        *,
        max_workers: int = 1,
        executor: Executor | None = None,
        key_provider: KeyProvider | None = None,
    ) -> None:
        if executor is None and max_workers < 1:  # confluent_kafka.aio.AIOConsumer's check and words
            raise ValueError("max_workers must be at least 1")
        super().__init__(executor, "gateway-aio-consumer")
        # one worker drives the client whatever max_workers says: its bookkeeping is not shared between threads
        self._client: HybridConsumer = HybridConsumer(consumer_conf, stores=stores, key_provider=key_provider)

    @property
    def inner(self) -> HybridConsumer:
        return self._client

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Every call first lets the consumer act on what earlier polls handed over (see :meth:`poll`)."""
        return await super()._call(self._client.handoff.call, None, fn, *args, **kwargs)

    async def poll(self, timeout: float = -1) -> Message | None:
        """``poll`` on the worker thread; cancelled at any point, it loses nothing.

        A message the worker's ``poll`` returned after the caller was cancelled is handed out by
        the next ``poll``/``consume``, before anything newer, and no commit covers it until then.
        """
        return await self._lend(self._client.poll, timeout)  # type: ignore[no-any-return]

    async def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """``consume`` on the worker thread; cancelled at any point, it loses nothing (as :meth:`poll`)."""
        return await self._lend(self._client.consume, num_messages, timeout)  # type: ignore[no-any-return]

    async def _lend(self, fn: Callable[..., Any], *args: Any) -> Any:
        delivery = PendingDelivery()
        try:
            return await super()._call(self._client.handoff.call, delivery, fn, *args)
        except asyncio.CancelledError:
            delivery.returned()  # whatever the worker hands over from now on did not arrive
            raise
        finally:
            delivery.received()  # a value returned or an error raised here reaches the caller


_CONSUMER_CALLS = (
    "subscribe",
    "unsubscribe",
    "assign",
    "unassign",
    "incremental_assign",
    "incremental_unassign",
    "assignment",
    "commit",
    "committed",
    "position",
    "seek",
    "pause",
    "resume",
    "store_offsets",
    "offsets_for_times",
    "get_watermark_offsets",
    "list_topics",
    "cluster_id",
    "consumer_group_metadata",
    "set_sasl_credentials",
    "safe_offset",
    "safe_offsets",
    "memberid",
)
for _name in _CONSUMER_CALLS:
    setattr(AIOHybridConsumer, _name, _delegating(_name))
