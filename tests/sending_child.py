"""A producer process for the crash test: sends reference messages until it is killed, printing each ack.

Every acknowledged key is printed as ``ACK <key>`` and flushed at once, so the test knows exactly
which messages the producer saw acknowledged before it was SIGKILLed mid-send.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import redis

from gateway import HybridProducer, SizeThresholdPolicy
from stores import RedisStore
from tests.helpers import payload


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--prefix", required=True)
    args = parser.parse_args()
    store = RedisStore(redis.Redis.from_url(args.redis_url), prefix=args.prefix)
    producer = HybridProducer(
        {"bootstrap.servers": args.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5},
        policy=SizeThresholdPolicy(reference_above=500_000, store="redis"),
        stores={"redis": store},
    )

    def acked(key: str) -> Any:
        def report(err: Any, msg: Any) -> None:
            if err is None:
                print(f"ACK {key}", flush=True)

        return report

    i = 0
    while True:  # until killed
        key = f"m{i:05d}"
        producer.produce(args.topic, payload(700_000, seed=i), key=key.encode(), on_delivery=acked(key))
        producer.poll(0.01)
        i += 1


if __name__ == "__main__":
    sys.exit(main())
