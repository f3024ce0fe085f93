"""``gateway gc`` tells how far its scan got on stderr, and says nothing with ``--quiet``.

A scan of a large topic runs up to ``--scan-timeout`` (ten minutes by default); before, gc printed
nothing until the end. ``--progress-every 0`` prints at every fetched batch, so the lines do not
depend on how fast this machine reads (no timed assertion); the default (every 2 s) is the same
code with a longer wait.
"""

from __future__ import annotations

import re
import uuid

import redis
from confluent_kafka import Producer

from gateway.testing import KafkaService, RedisServer
from stores import RedisStore
from tests.integration.test_gc import orphan, run_gc

RECORDS = 20_000


def _fill(kafka: KafkaService, topic: str) -> None:
    producer = Producer({**kafka.client_conf(), "linger.ms": 20})
    for i in range(RECORDS):
        producer.produce(topic, value=b"plain record %d" % i)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def test_gc_shows_the_scan_progress_on_stderr_and_nothing_with_quiet(
    kafka: KafkaService, topic: str, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    prefix = f"gcprog{uuid.uuid4().hex[:8]}"
    _fill(kafka, topic)
    orphan(RedisStore(redis_client, prefix=prefix), topic)
    args = ["--redis-url", redis_server.url, "--redis-prefix", prefix, "--grace", "0"]
    args += ["--bootstrap", kafka.bootstrap_servers, "--progress-every", "0"]

    shown = run_gc(*args)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "would delete 1" in shown.stdout  # the report stays on stdout, whole
    line = rf"^gateway gc: scan {topic}: (\d+) of (\d+) records \(\d+%\)(?:, \d+ records/s)?$"
    scan = re.findall(line, shown.stderr, re.MULTILINE)
    assert len(scan) >= 2, shown.stderr  # the start, and every batch after it
    assert {int(total) for _, total in scan} == {RECORDS}
    assert [int(done) for done, _ in scan] == sorted(int(done) for done, _ in scan)
    assert int(scan[-1][0]) == RECORDS
    assert "gateway gc: sweep pending writes: 1 of 1 writes (100%)" in shown.stderr
    assert "gateway gc: scan" not in shown.stdout

    quiet = run_gc(*args, "--quiet")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert quiet.stderr == ""
    assert quiet.stdout == shown.stdout
