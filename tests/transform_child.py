"""A consume-transform-produce loop with transactions, for the kill/restart test.

It copies ``--source`` to ``--target`` in transactions of up to ``--batch`` messages, handing the
consumer's safe offsets to each transaction. With ``--die-after N`` it kills itself (``os._exit``)
after producing its N-th output message, in the middle of a transaction. It exits 0 once the
source has had nothing new for a few seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import redis
from confluent_kafka import TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from stores import RedisStore


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--die-after", type=int, default=0)
    args = parser.parse_args()
    stores = {"redis": RedisStore(redis.Redis.from_url(args.redis_url), prefix=args.prefix)}
    consumer = HybridConsumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        },
        stores=stores,
    )
    producer = HybridProducer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.transactional_id,
            "max.message.segment.bytes": 100_000,
        },
        policy=SizeThresholdPolicy(reference_above=1_000_000, store="redis"),
        stores=stores,
    )
    producer.init_transactions(60)
    # assign, not subscribe: a killed member would hold the partition until its session times out;
    # with no group membership the restarted loop resumes at once from the committed offset
    consumer.assign([TopicPartition(args.source, 0)])
    produced = 0
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 8:
        messages = consumer.consume(args.batch, 1.0)
        if not messages:
            continue
        idle_since = time.monotonic()
        producer.begin_transaction()
        for msg in messages:
            producer.produce(args.target, msg.value(), key=msg.key())
            produced += 1
            if produced == args.die_after:
                producer.flush(30)  # the records are in the log, the transaction still open
                os._exit(9)
        producer.send_offsets_to_transaction(consumer.safe_offsets(), consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
    producer.close()
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
