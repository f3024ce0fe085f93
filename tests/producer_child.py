"""A producer process for the crash-window test: writes a reference payload, then waits to be killed.

It points the producer at a Kafka address nobody listens on, so the envelope can never be
acknowledged: the store write happened, the acknowledgement never comes.
"""

from __future__ import annotations

import argparse
import sys
import time

import redis

from gateway import HybridProducer
from stores import RedisStore


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--prefix", default="gw")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--dead-bootstrap", required=True)
    args = parser.parse_args()
    store = RedisStore(redis.Redis.from_url(args.redis_url), prefix=args.prefix)
    producer = HybridProducer(
        {"bootstrap.servers": args.dead_bootstrap, "message.timeout.ms": 600_000}, stores={"redis": store}
    )
    producer.produce(args.topic, b"o" * 2_000_000, key=b"orphan", route="reference:redis")
    print("WRITTEN", flush=True)
    time.sleep(120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
