"""Consumer memory and speed of one large reference payload read as a ``gateway.PayloadStream``.

:func:`consume_stream_peak` writes a payload of ``size`` bytes straight into the store with its raw
client (S3: a multipart upload; Redis: the store's entries), its envelope into Kafka with a plain
producer, so that nothing of the writing is in the measured process. A fresh interpreter then reads
the message with ``HybridConsumer`` (``value.stream.threshold.bytes`` set) through ``readinto`` of
range-sized buffers, and reads the same bytes with the store's raw client in ranges of the same size
(S3 ranged GETs, Redis GETRANGE), each inside :class:`~benchmarks.common.PeakMemory`. It reports the
peak RSS growth and throughput of both.

    python -m benchmarks.stream_consume_memory --size 1GiB --stores s3,redis [--backend mock|kafka]

The payload is BLAKE3's extendable output of a seed (made a range at a time, so no process holds it whole).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import blake3

from benchmarks.common import ROOT, PeakMemory, bench_kafka, malloc_mode
from gateway.protocol.envelope import CHECKSUM_BLAKE3, Envelope, encode_envelope, envelope_header
from gateway.testing import KafkaService, RedisServer, S3Server

MiB = 1024 * 1024
SEED = b"stream-consume-memory"
WRITE_PART = 64 * MiB


def _block(offset: int, length: int) -> bytes:
    return blake3.blake3(SEED).digest(length=length, seek=offset)


def _write_s3(client: Any, bucket: str, key: str, size: int) -> bytes:
    """The payload as a multipart upload, part by part; its BLAKE3."""
    hasher = blake3.blake3()
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for number, at in enumerate(range(0, size, WRITE_PART), start=1):
        data = _block(at, min(WRITE_PART, size - at))
        hasher.update(data)
        etag = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=data)["ETag"]
        parts.append({"PartNumber": number, "ETag": etag})
    client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts})
    return hasher.digest()


def _write_redis(client: Any, keys: list[str], entry_bytes: int, size: int) -> bytes:
    hasher = blake3.blake3()
    for index, key in enumerate(keys):
        at = index * entry_bytes
        data = _block(at, min(entry_bytes, size - at))
        hasher.update(data)
        client.set(key, data)
    return hasher.digest()


def _produce_envelope(kafka: KafkaService, topic: str, envelope: Envelope) -> None:
    from confluent_kafka import Producer

    producer = Producer(kafka.producer_config())
    producer.produce(topic, encode_envelope(envelope), headers=[envelope_header()])
    assert producer.flush(60) == 0


def consume_stream_peak(
    kafka: KafkaService,
    store_kind: str,
    size: int,
    *,
    redis_server: RedisServer | None = None,
    s3_server: S3Server | None = None,
    range_bytes: int = 8 * MiB,
    read_ahead: int = 2,
    whole: bool = False,
) -> dict[str, Any]:
    """Write one ``size``-byte payload to ``store_kind`` (``s3`` or ``redis``) and its envelope to a fresh topic,
    then read it as a stream (``whole``: as ``bytes``, the threshold off) and with the raw client in a fresh
    process: its JSON report."""
    topic = f"stream-{store_kind}-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=1)
    message_id = uuid.uuid4()
    spec: dict[str, Any] = {
        "bootstrap": kafka.bootstrap_servers,
        "client_config": kafka.client_config,
        "consumer_defaults": kafka.consumer_defaults,
        "topic": topic,
        "store": store_kind,
        "size": size,
        "range_bytes": range_bytes,
        "read_ahead": read_ahead,
        "whole": whole,
    }
    store: Any
    parsed: Any = None
    if store_kind == "s3":
        from stores import S3Store

        assert s3_server is not None
        client = s3_server.client(read_timeout=900)  # the emulator joins the parts in one request
        bucket = f"stream-{uuid.uuid4().hex[:8]}"
        client.create_bucket(Bucket=bucket)
        store = S3Store(client, bucket=bucket, prefix="bench/")
        locator = store.locator_for(topic, message_id)
        digest = _write_s3(client, bucket, store.validate_locator(locator).key, size)
        spec.update(s3_endpoint=s3_server.endpoint_url, bucket=bucket, prefix="bench/")
    else:
        from stores import RedisStore

        assert redis_server is not None
        client = redis_server.client()
        prefix = f"bench{uuid.uuid4().hex[:6]}"
        store = RedisStore(client, prefix=prefix)
        locator = store.locator_for(topic, message_id, size)
        parsed = store.validate_locator(locator)
        digest = _write_redis(client, parsed.keys(prefix), parsed.entry_bytes, size)
        spec.update(redis_url=redis_server.url, prefix=prefix)
    envelope = Envelope(store.name, locator, size, digest, message_id, checksum=CHECKSUM_BLAKE3)
    _produce_envelope(kafka, topic, envelope)
    spec["locator"] = locator
    try:
        return _in_child(spec)
    finally:
        if store_kind == "redis":
            client.delete(*parsed.keys(spec["prefix"]))


def _in_child(spec: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.stream_consume_memory", "--child"],
        input=json.dumps(spec),
        text=True,
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"stream memory pass failed ({done.returncode}):\n{done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


class _Attached(KafkaService):
    """The parent's broker, reached by address."""

    name = "external"


def _child() -> int:
    from gateway import HybridConsumer, PayloadStream

    spec = json.load(sys.stdin)
    malloc_mode("lean")
    kafka = _Attached(version="attached", bootstrap_servers=spec["bootstrap"], client_config=spec["client_config"])
    kafka.consumer_defaults = dict(spec["consumer_defaults"])
    size, step = int(spec["size"]), int(spec["range_bytes"])
    if spec["store"] == "s3":
        from stores import S3Store

        s3 = S3Server(spec["s3_endpoint"], from_env=False).client()
        store: Any = S3Store(s3, bucket=spec["bucket"], prefix=spec["prefix"])

        def raw_range(at: int, length: int) -> int:
            body = s3.get_object(Bucket=spec["bucket"], Key=key, Range=f"bytes={at}-{at + length - 1}")["Body"]
            got = len(body.read())
            body.close()
            return got

        key = store.validate_locator(spec["locator"]).key
    else:
        from stores import RedisStore

        redis = RedisServer(spec["redis_url"], from_env=False).client(socket_timeout=600)
        store = RedisStore(redis, prefix=spec["prefix"])
        parsed = store.validate_locator(spec["locator"])
        keys = parsed.keys(spec["prefix"])

        def raw_range(at: int, length: int) -> int:
            index = at // parsed.entry_bytes
            low = at - index * parsed.entry_bytes
            return len(redis.getrange(keys[index], low, low + length - 1))  # ranges stay inside an entry

    whole = bool(spec.get("whole"))
    conf = kafka.consumer_config(
        None,
        **{
            "auto.offset.reset": "earliest",
            "value.stream.threshold.bytes": 1,
            "value.stream.range.bytes": step,
            "value.stream.read.ahead": int(spec["read_ahead"]),
        },
    )
    if whole:
        del conf["value.stream.threshold.bytes"]  # off: the default
    consumer = HybridConsumer(conf, stores={store.name: store})
    consumer.subscribe([spec["topic"]])
    buffer = bytearray(step)
    with PeakMemory() as streamed:
        started = time.perf_counter()
        msg = None
        while msg is None or msg.error() is not None:
            msg = consumer.poll(1.0)
        stream = msg.value()
        first = time.perf_counter()
        read = 0
        if whole:  # before streams: the payload is bytes, fetched whole before poll returns
            assert isinstance(stream, bytes)
            read, stream = len(stream), None
        else:
            assert isinstance(stream, PayloadStream)
            while n := stream.readinto(buffer):
                read += n
        stream_s = time.perf_counter() - first
        total_s = time.perf_counter() - started
    consumer.close()
    assert read == size
    with PeakMemory() as raw:
        started = time.perf_counter()
        raw_read = sum(raw_range(at, min(step, size - at)) for at in range(0, size, step))
        raw_s = time.perf_counter() - started
    assert raw_read == size
    report = {
        "store": spec["store"],
        "value": "bytes" if whole else "stream",
        "size": size,
        "range_bytes": step,
        "read_ahead": spec["read_ahead"],
        "stream_peak_rss_growth_mib": round(streamed.growth / MiB, 1),
        "stream_mb_s": round(size / (total_s if whole else stream_s) / 1e6, 1),
        "stream_with_poll_s": round(total_s, 2),
        "raw_peak_rss_growth_mib": round(raw.growth / MiB, 1),
        "raw_mb_s": round(size / raw_s / 1e6, 1),
    }
    print(json.dumps(report))
    return 0


def _size(text: str) -> int:
    units = {"KiB": 1024, "MiB": MiB, "GiB": 1024 * MiB}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--size", default="1GiB")
    parser.add_argument("--stores", default="s3,redis")
    parser.add_argument("--backend", default="mock")
    parser.add_argument("--range-bytes", default="8MiB")
    parser.add_argument("--read-ahead", type=int, default=2)
    parser.add_argument("--whole", action="store_true", help="threshold off: value() is bytes (the behaviour before)")
    args = parser.parse_args(argv)
    if args.child:
        return _child()
    size, step = _size(args.size), _size(args.range_bytes)
    kinds = args.stores.split(",")
    with bench_kafka(args.backend) as kafka:
        redis_server = RedisServer(from_env=False).start() if "redis" in kinds else None
        s3_server = S3Server(from_env=False).start() if "s3" in kinds else None
        try:
            for kind in kinds:
                report = consume_stream_peak(
                    kafka,
                    kind,
                    size,
                    redis_server=redis_server,
                    s3_server=s3_server,
                    range_bytes=step,
                    read_ahead=args.read_ahead,
                    whole=args.whole,
                )
                print(json.dumps(report), flush=True)
        finally:
            for server in (redis_server, s3_server):
                if server is not None:
                    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
