"""How far one message walks through the library: modules touched and crossings between folders.

An architecture figure, not a speed one. One walk runs under :func:`sys.setprofile`; every Python
call into a module of ``gateway`` or ``stores`` is noted in order. Printed: the distinct modules
whose functions ran, and how often the walk changed folder (``gateway/consumer`` to
``gateway/core`` and back counts two), along the call sequence.

    python -m benchmarks.walks consumer   # a chunked 8 MB record from poll() to the application (Apache Kafka)
    python -m benchmarks.walks producer   # one large produce() to a real Redis until its delivery callback (mock)

Only the library under test is imported by name, so ``PYTHONPATH=<other checkout> python
benchmarks/walks.py consumer`` measures that checkout with this tool.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

MESSAGE = 8 * 1024 * 1024
SEGMENT = 800_000
REDIS_MESSAGE = 8 * 1024 * 1024
CONSUMER_CONF: dict[str, Any] = {
    "enable.auto.commit": False,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 10_485_760,
    "receive.message.max.bytes": 200_000_000,
}


@dataclass
class Walk:
    """Calls into the library, in order, as ``(module, folder)``."""

    roots: tuple[str, ...]
    modules: Counter[str] = field(default_factory=Counter)
    crossings: Counter[tuple[str, str]] = field(default_factory=Counter)
    _last_folder: str | None = None

    def note(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        where = _ours(frame.f_code.co_filename, self.roots)
        if where is None:
            return
        module, folder = where
        self.modules[module] += 1
        if self._last_folder is not None and folder != self._last_folder:
            self.crossings[(self._last_folder, folder)] += 1
        self._last_folder = folder

    def report(self, title: str) -> str:
        lines = [
            f"{title}: {len(self.modules)} modules, {sum(self.crossings.values())} folder crossings",
            "  crossings: "
            + ", ".join(f"{a}->{b} {n}" for (a, b), n in sorted(self.crossings.items(), key=lambda kv: -kv[1])),
            "  modules: " + ", ".join(sorted(self.modules)),
        ]
        return "\n".join(lines)


def _ours(filename: str, roots: tuple[str, ...]) -> tuple[str, str] | None:
    for root in roots:
        if filename.startswith(root):
            rel = Path(filename[len(root) :].lstrip(os.sep))
            if rel.parts[0] not in ("gateway", "stores") or rel.parts[1:2] == ("testing",):
                return None
            return rel.as_posix(), rel.parent.as_posix()
    return None


@contextmanager
def walked(walk: Walk) -> Iterator[None]:
    sys.setprofile(walk.note)
    try:
        yield
    finally:
        sys.setprofile(None)


def _roots() -> tuple[str, ...]:
    import gateway
    import stores

    return tuple(str(Path(m.__file__ or "").resolve().parent.parent) + os.sep for m in (gateway, stores))


def consumer_walk(backend: str) -> Walk:
    """A chunked 8 MB message, every segment already fetched by librdkafka, from ``poll()`` to the caller."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from gateway import HybridConsumer, HybridProducer
    from gateway.testing.backends import start_kafka

    kafka = start_kafka(backend)  # the mock keeps about 5 MiB per partition: an 8 MB message needs Apache Kafka
    try:
        topic = f"walk-{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic)
        producer = HybridProducer(
            {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT, "large.message.max.bytes": 64_000_000}
        )
        errors: list[Any] = []
        producer.produce(topic, os.urandom(MESSAGE), key=b"k", partition=0, on_delivery=lambda e, _m: errors.append(e))
        assert producer.flush(30) == 0 and errors == [None], errors
        consumer = HybridConsumer(kafka.consumer_config(**CONSUMER_CONF))
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        time.sleep(2)  # librdkafka prefetches every segment: the walk is the library's, not the network's
        walk = Walk(_roots())
        with walked(walk):
            msg = _first(consumer.poll)
        assert msg is not None and len(msg.value()) == MESSAGE, msg
        consumer.close()
        return walk
    finally:
        kafka.close()


def _first(poll: Callable[[float], Any]) -> Any:
    for _ in range(20):
        msg = poll(1.0)
        if msg is not None:
            return msg
    return None


def producer_walk(backend: str) -> Walk:
    """One 8 MB ``produce()`` to a real redis-server (reference route) until its delivery callback ran."""
    from gateway import HybridProducer, SizeThresholdPolicy
    from gateway.testing.backends import start_kafka
    from gateway.testing.redis_server import RedisServer
    from stores import RedisStore

    kafka = start_kafka(backend)
    redis_server = RedisServer(from_env=False).start()
    try:
        topic = f"walk-{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic)
        store = RedisStore(redis_server.client(), prefix=f"walk{uuid.uuid4().hex[:6]}")
        producer = HybridProducer(
            kafka.producer_config(),
            policy=SizeThresholdPolicy(reference_above=1_000_000, store="redis"),
            stores={"redis": store},
        )
        producer.produce(topic, b"warm", key=b"w")  # the producer's first contact with the topic is not the walk
        assert producer.flush(30) == 0
        value = os.urandom(REDIS_MESSAGE)
        done: list[Any] = []
        walk = Walk(_roots())
        with walked(walk):
            producer.produce(topic, value, key=b"k", on_delivery=lambda err, _msg: done.append(err))
            while not done:
                producer.poll(0.1)
        assert done == [None], done
        producer.flush(30)
        return walk
    finally:
        redis_server.close()
        kafka.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("walk", choices=["consumer", "producer"])
    parser.add_argument("--repeat", type=int, default=1, help="walks to run (each in a fresh cluster)")
    parser.add_argument("--backend", default=None, help="kafka (default for consumer) | mock (default for producer)")
    args = parser.parse_args(argv)
    run = consumer_walk if args.walk == "consumer" else producer_walk
    backend = args.backend or ("kafka" if args.walk == "consumer" else "mock")
    for i in range(args.repeat):
        print(run(backend).report(f"{args.walk} walk {i + 1}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
