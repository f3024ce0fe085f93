"""Where chunked produce spends CPU beyond its ceiling: the ceiling with each of the route's costs added back.

``raw.segments`` (the chunked route's ceiling) sends segment records built before the clock
starts and asks for no delivery reports. Any chunker on confluent-kafka pays two more things per
segment, whatever its own code does: it builds the segment (``produce`` takes ``bytes`` only, so
the 33-byte header and the chunk are joined into a new object: one copy of the chunk), and it
learns each segment's outcome (confluent-kafka copies the record's value into the ``Message`` it
hands to ``on_delivery``: a second copy). This measures raw confluent-kafka with those costs
added one at a time beside ``HybridProducer``, in alternating order, and reports CPU per message
(the producing thread alone, and the whole process) with each variant's median and min-max.
``chunked`` level with ``raw+build+reports`` means the gateway's own code adds nothing measurable.

    python -m benchmarks.chunk_cost [--backend kafka] [--size 1000000] [--messages 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import Producer

from benchmarks.common import bench_kafka, malloc_mode, payload, stat
from benchmarks.variants import CHUNK_MESSAGE_MAX, SEGMENT  # the route suite's records, so they match its ceiling
from gateway import HybridProducer
from gateway.protocol.headers import encode_timestamp
from gateway.protocol.splitter import iter_split

VARIANTS = ("raw", "raw+reports", "raw+build", "raw+build+reports", "chunked")


def _process_cpu() -> tuple[float, int]:
    """CPU seconds of every thread, and minor page faults (fresh memory touched: librdkafka's copies mostly)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_minflt


def _segments(topic: str, key: bytes, value: bytes) -> Iterator[dict[str, Any]]:
    """The records ``HybridProducer`` writes for one message (as ``benchmarks.variants.Work.segments``)."""
    ts = int(time.time() * 1000)
    for r in iter_split(topic, 0, ts, uuid.uuid4(), key, value, SEGMENT, [("_t", encode_timestamp(ts))]):
        yield {"value": bytes(r.value or b""), "key": r.key, "partition": 0, "headers": r.headers, "timestamp": ts}


def _produce(producer: Any, topic: str, record: dict[str, Any]) -> None:
    while True:
        try:
            producer.produce(topic, **record)
            return
        except BufferError:
            producer.poll(0.01)


def _ignore(err: Any, msg: Any) -> None:
    """A delivery report handler: confluent-kafka builds (and copies) the ``Message`` before calling it."""


def _job(variant: str, conf: dict[str, Any], topic: str, keys: list[bytes], values: list[bytes]) -> Callable[[], None]:
    """The timed part of ``variant``; producers are made and warmed, and ceiling records built, before it."""
    if variant == "chunked":
        hybrid = HybridProducer({**conf, "max.message.segment.bytes": SEGMENT, "large.message.max.bytes": 256_000_000})
        hybrid.prepare_topics([topic])

        def run_chunked() -> None:
            for key, value in zip(keys, values, strict=True):
                while True:
                    try:
                        hybrid.produce(topic, value, key=key, partition=0, route="chunked")
                        break
                    except BufferError:
                        hybrid.poll(0.01)
            assert hybrid.flush(120) == 0

        return run_chunked
    producer = Producer(conf)
    producer.list_topics(topic, timeout=10)
    reports = {"on_delivery": _ignore} if variant.endswith("+reports") else {}
    prebuilt = (
        None if "+build" in variant else [r for k, v in zip(keys, values, strict=True) for r in _segments(topic, k, v)]
    )

    def run_raw() -> None:
        records = (
            prebuilt
            if prebuilt is not None
            else (r for k, v in zip(keys, values, strict=True) for r in _segments(topic, k, v))
        )
        for record in records:
            _produce(producer, topic, {**record, **reports} if reports else record)
        assert producer.flush(120) == 0

    return run_raw


def run(backend: str, size: int, messages: int, rounds: int) -> dict[str, Any]:
    malloc_mode("fast")  # as the timed suites run
    values = [payload(size, i) for i in range(messages)]
    keys = [f"k{i:07d}".encode() for i in range(messages)]
    samples: dict[str, list[tuple[float, float, float, float]]] = {v: [] for v in VARIANTS}
    with bench_kafka(backend) as kafka:
        conf = {**kafka.client_conf(), "message.max.bytes": CHUNK_MESSAGE_MAX}
        for rnd in range(rounds):
            for variant in VARIANTS if rnd % 2 == 0 else VARIANTS[::-1]:
                topic = f"cost-{uuid.uuid4().hex[:8]}"
                kafka.create_topic(topic, partitions=1)
                job = _job(variant, conf, topic, keys, values)
                (cpu, faults), thread, wall = _process_cpu(), time.thread_time(), time.perf_counter()
                job()
                thread, wall = time.thread_time() - thread, time.perf_counter() - wall
                cpu_after, faults_after = _process_cpu()
                cpu, faults = cpu_after - cpu, faults_after - faults
                per = 1e6 / messages
                samples[variant].append((thread * per, cpu * per, size * messages / wall / 1e6, faults / messages))
                print(
                    f"round {rnd} {variant:18s} thread {samples[variant][-1][0]:6.0f} us/msg  process "
                    f"{samples[variant][-1][1]:6.0f} us/msg  {samples[variant][-1][2]:7.1f} MB/s  "
                    f"{samples[variant][-1][3]:6.0f} faults/msg",
                    flush=True,
                )
                del job
                kafka.delete_topic(topic)
        backend_name = f"{kafka.name} {kafka.version}"
    return {
        "backend": backend_name,
        "size": size,
        "messages": messages,
        "rounds": rounds,
        "variants": {
            v: {
                "thread_us_per_message": stat(s[0] for s in rows),
                "process_us_per_message": stat(s[1] for s in rows),
                "MBps": stat(s[2] for s in rows),
                "faults_per_message": stat(s[3] for s in rows),
            }
            for v, rows in samples.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="kafka", help="kafka (default), mock, ...")
    parser.add_argument("--size", type=int, default=1_000_000, help="message size in bytes")
    parser.add_argument("--messages", type=int, default=300, help="messages per variant and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each variant once per round, order alternating")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on the last line")
    args = parser.parse_args(argv)
    results = run(args.backend, args.size, args.messages, args.rounds)
    print(f"{results['backend']}, {args.size} B x {args.messages}, {args.rounds} rounds: median (min-max)")
    for variant, row in results["variants"].items():
        cells = [
            f"{row[k]['median']:7.0f} ({row[k]['min']:.0f}-{row[k]['max']:.0f})"
            for k in ("thread_us_per_message", "process_us_per_message")
        ]
        print(
            f"  {variant:18s} thread us/msg {cells[0]:22s} process us/msg {cells[1]:22s} "
            f"MB/s {row['MBps']['median']:7.1f} faults/msg {row['faults_per_message']['median']:6.0f}"
        )
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
