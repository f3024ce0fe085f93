"""A transactional producer for the aborted-transaction gc test: sends reference messages, flushes, waits to be killed.

It opens a transaction, sends ``--count`` reference messages, flushes (so Kafka holds every envelope
and the store every payload, each still marked pending: an open transaction never clears its marks),
prints ``FLUSHED`` and sleeps with the transaction open until the test SIGKILLs it.
"""

from __future__ import annotations

import argparse
import sys
import time

import redis

from gateway import HybridProducer
from stores import RedisStore
from tests.helpers import payload


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--count", type=int, default=3)
    args = parser.parse_args()
    store = RedisStore(redis.Redis.from_url(args.redis_url), prefix=args.prefix)
    producer = HybridProducer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.transactional_id,
            "transaction.timeout.ms": 300_000,  # the transaction stays open until a successor aborts it
        },
        stores={"redis": store},
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(args.count):
        producer.produce(args.topic, payload(200_000, seed=i), key=b"%d" % i, route="reference:redis")
    if producer.flush(60) != 0:
        return 1
    print("FLUSHED", flush=True)
    time.sleep(120)  # killed long before
    return 0


if __name__ == "__main__":
    sys.exit(main())
