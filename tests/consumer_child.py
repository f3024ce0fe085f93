"""A consumer process for the restart test: records what it delivers, commits after each message.

With ``--hold-when-pending N`` it stops, after a commit, once it has delivered at least N messages
while a large message is half-read, prints ``HOLDING`` and waits to be killed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

from gateway import HybridConsumer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--hold-when-pending", type=int, default=0)
    parser.add_argument("--idle-exit", type=float, default=4.0)
    parser.add_argument("--instance-id", default=None, help="static membership: a restart takes the old seat")
    args = parser.parse_args()
    consumer = HybridConsumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            **({"group.instance.id": args.instance_id} if args.instance_id else {}),
        }
    )
    consumer.subscribe([args.topic])
    delivered = 0
    started = time.monotonic()
    idle_since: float | None = None  # counted from the first message: a group join may wait for a dead member
    with open(args.out, "a", buffering=1) as out:
        while time.monotonic() - started < 90 and (
            idle_since is None or time.monotonic() - idle_since < args.idle_exit
        ):
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            idle_since = time.monotonic()
            out.write(
                json.dumps(
                    {
                        "key": msg.key().decode(),
                        "offset": msg.offset(),
                        "sha": hashlib.sha256(msg.value() or b"").hexdigest(),
                    }
                )
                + "\n"
            )
            out.flush()
            os.fsync(out.fileno())
            consumer.commit(asynchronous=False)
            delivered += 1
            pending = consumer.metrics()["assembler.incomplete.messages"]
            if args.hold_when_pending and delivered >= args.hold_when_pending and pending:
                print("HOLDING", flush=True)
                time.sleep(120)
    consumer.close()
    print(f"DONE {delivered}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
