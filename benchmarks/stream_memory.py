"""``produce_stream``'s memory and speed: N GiB through S3 (moto) and Redis, against the stores' raw clients.

Each measurement runs in a fresh interpreter, so that its peak RSS (``VmHWM``, reset before the
run where the kernel allows it) is the run's alone. The producer side streams a generated source
(a deterministic 1 MiB block stamped with its index, never held whole) through ``produce_stream``
by reference, and reports the peak RSS growth over the process's RSS before the stream, the
seconds from the first byte to the delivered envelope, and the stored size. The raw side moves the
same bytes with the same part size through the store's own client: boto3's multipart upload
(CreateMultipartUpload, UploadPart per part, CompleteMultipartUpload, one part at a time as the
producer sends them) and redis-py SETs of the same parts.

After each ``produce_stream`` run, the consumer side (:func:`consume_side`) reads that one message in
another fresh interpreter with ``value.stream.threshold.bytes`` on: ``value()`` is a ``PayloadStream``,
read to its end with ``readinto`` into one reused buffer and hashed, so the table says the consumer's
peak RSS growth and speed and whether the SHA-256 of what it read equals the generated stream's; the
same child then reads the stored bytes with the raw client in ranges of the same size (boto3 ranged
GETs; redis-py GETs of the entries, which are the parts). Everything the run stored is deleted after.

    python -m benchmarks.stream_memory --gib 1 --stores s3,redis [--part-mib 8] [--range-mib 8] [--pairs 1]
        [--backend kafka] [--json benchmarks/results/streams.json]

``gateway bench --suite streams --update-docs`` runs it for Redis at 4 GiB and S3 at 1 GiB, merges
each store's run into ``benchmarks/results/streams.json`` and renders the page's section
(:mod:`benchmarks.stream_report`).

Starts redis-server, moto's S3 server and a Kafka backend (``KAFKA_TEST_BACKEND``, mock by default)
and stops them again. The Redis server and moto hold the stream in memory: check ``free -g`` first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, PeakMemory, malloc_mode

MiB = 1024 * 1024
GiB = 1024 * MiB
BLOCK = MiB


def generated(size: int) -> Iterator[bytes]:
    """``size`` deterministic bytes in 1 MiB chunks, each block stamped with its index (no two parts alike)."""
    base = bytearray((i * 131 + 7) % 251 for i in range(BLOCK))
    sent, index = 0, 0
    while sent < size:
        n = min(BLOCK, size - sent)
        base[:8] = index.to_bytes(8, "big")
        yield bytes(base[:n])
        sent += n
        index += 1


def consume_side(spec: dict[str, Any]) -> dict[str, Any]:
    """The consumer's figures for the stream just produced to ``spec["topic"]``, from a fresh interpreter."""
    return run_child("consume", spec)


def expected_digest(size: int) -> str:
    """SHA-256 of the generated stream of ``size`` bytes, as the consumer must read it."""
    hasher = hashlib.sha256()
    for chunk in generated(size):
        hasher.update(chunk)
    return hasher.hexdigest()


# -- the child processes ------------------------------------------------------------------------
def _store(spec: dict[str, Any], store: str) -> Any:
    from gateway.testing import RedisServer, S3Server
    from stores import RedisStore, S3Store

    if store == "redis":
        client = RedisServer(spec["redis_url"], from_env=False).client()
        return RedisStore(client, prefix=spec["prefix"], close_client=True)
    # moto answers a multi-GiB CompleteMultipartUpload slowly: botocore's 60 s would retry a completed upload
    s3 = S3Server(spec["s3_endpoint"], from_env=False).client(read_timeout=1800)
    return S3Store(s3, bucket=spec["bucket"], prefix=spec["prefix"] + "/", multipart_chunk_bytes=spec["part"])


def child_produce(spec: dict[str, Any]) -> dict[str, Any]:
    from gateway import HybridProducer, SizeThresholdPolicy

    name, size = spec["store"], spec["size"]
    store = _store(spec, name)
    conf = {
        "bootstrap.servers": spec["bootstrap"],
        **spec["client_config"],
        "reference.stream.part.bytes": spec["part"],
        "reference.max.payload.bytes": 2 * size + GiB,
    }
    producer = HybridProducer(conf, policy=SizeThresholdPolicy(reference_above=0, store=name), stores={name: store})
    producer.list_topics(spec["topic"], timeout=30)  # the connection and metadata, before the measurement
    reports: list[Any] = []
    with PeakMemory() as mem:
        started = time.perf_counter()
        producer.produce_stream(spec["topic"], generated(size), size, route=f"reference:{name}",
                                on_delivery=lambda err, msg: reports.append(err))  # fmt: skip
        producer.flush(600)
        seconds = time.perf_counter() - started
    producer.close()
    if reports != [None]:
        raise RuntimeError(f"the envelope was not delivered: {reports}")
    stored = _stored(spec, store, clean=False)
    return {"growth_bytes": mem.growth, "seconds": seconds, "stored": stored}


def child_consume(spec: dict[str, Any]) -> dict[str, Any]:
    """Read the topic's one message as a stream, hash it; then the stored bytes with the raw client; clean up."""
    from gateway import HybridConsumer, PayloadStream

    name, size, step = spec["store"], spec["size"], spec["range"]
    malloc_mode("lean")  # as the other memory passes: glibc's moving mmap threshold would keep freed ranges
    store = _store(spec, name)
    conf = {
        "bootstrap.servers": spec["bootstrap"],
        **spec["client_config"],
        "group.id": f"stream-memory-{uuid.uuid4().hex[:6]}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "value.stream.threshold.bytes": 1,
        "value.stream.range.bytes": step,
        "reference.max.payload.bytes": 2 * size + GiB,
    }
    consumer = HybridConsumer(conf, stores={name: store})
    consumer.subscribe([spec["topic"]])
    buffer, hasher, read = bytearray(step), hashlib.sha256(), 0
    with PeakMemory() as mem:
        started = time.perf_counter()
        msg = consumer.poll(60.0)
        while msg is None:
            msg = consumer.poll(60.0)
        if msg.error() is not None:
            raise RuntimeError(f"the envelope did not resolve: {msg.error()}")
        stream = msg.value()
        if not isinstance(stream, PayloadStream):
            raise RuntimeError(f"value() is {type(stream).__name__}, not a PayloadStream")
        view = memoryview(buffer)
        while n := stream.readinto(buffer):
            hasher.update(view[:n])
            read += n
        seconds = time.perf_counter() - started
    consumer.close()
    with PeakMemory() as raw_mem:
        started = time.perf_counter()
        raw_read = _raw_read(spec, store, step)
        raw_seconds = time.perf_counter() - started
    _stored(spec, store, clean=True)
    return {
        "growth_bytes": mem.growth, "seconds": seconds, "read": read, "sha256": hasher.hexdigest(),
        "raw_growth_bytes": raw_mem.growth, "raw_seconds": raw_seconds, "raw_read": raw_read,
    }  # fmt: skip


def _raw_read(spec: dict[str, Any], store: Any, step: int) -> int:
    """The stored payload's bytes read by the store's own client, ``step`` bytes a request (the marks left out)."""
    total = 0
    if spec["store"] == "s3":
        client, bucket = store.client, spec["bucket"]
        for obj in client.list_objects_v2(Bucket=bucket, Prefix=spec["prefix"] + "/").get("Contents", []):
            if "/_pending/" in obj["Key"] or obj["Key"].endswith(".batch"):
                continue
            for at in range(0, obj["Size"], step):
                end = min(at + step, obj["Size"]) - 1
                body = client.get_object(Bucket=bucket, Key=obj["Key"], Range=f"bytes={at}-{end}")["Body"]
                total += len(body.read())
                body.close()
        return total
    client = store.client
    for key in client.scan_iter(match=f"{spec['prefix']}*", count=1000):
        if client.type(key) == b"string":
            total += len(client.get(key) or b"")
    return total


def child_raw(spec: dict[str, Any]) -> dict[str, Any]:
    name, size, part = spec["store"], spec["size"], spec["part"]
    store = _store(spec, name)
    key = f"{spec['prefix']}/raw-{uuid.uuid4()}"
    with PeakMemory() as mem:
        started = time.perf_counter()
        if name == "s3":
            client, bucket = store.client, spec["bucket"]
            upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
            done = []
            for number, body in enumerate(_parts(size, part), 1):
                reply = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=body)
                done.append({"PartNumber": number, "ETag": reply["ETag"]})
            client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": done})
        else:
            for number, body in enumerate(_parts(size, part)):
                store.client.set(f"{key}:{number}", body)
        seconds = time.perf_counter() - started
    return {"growth_bytes": mem.growth, "seconds": seconds, "stored": _stored(spec, store, clean=True)}


def _parts(size: int, part: int) -> Iterator[bytes]:
    """The generated stream cut into parts of ``part`` bytes, one buffer reused as the producer does."""
    buffer, filled = bytearray(part), 0
    for chunk in generated(size):
        view = memoryview(chunk)
        while len(view):
            take = min(part - filled, len(view))
            buffer[filled : filled + take] = view[:take]
            filled, view = filled + take, view[take:]
            if filled == part:
                yield bytes(buffer)
                filled = 0
    if filled:
        yield bytes(buffer[:filled])


def _stored(spec: dict[str, Any], store: Any, *, clean: bool) -> int:
    """The bytes stored under the run's prefix (the check that the stream arrived whole), deleted if ``clean``."""
    total = 0
    if spec["store"] == "s3":
        client, bucket = store.client, spec["bucket"]
        for obj in client.list_objects_v2(Bucket=bucket, Prefix=spec["prefix"] + "/").get("Contents", []):
            if "/_pending/" not in obj["Key"]:
                total += obj["Size"]
            if clean:
                client.delete_object(Bucket=bucket, Key=obj["Key"])
    else:
        client = store.client
        for key in list(client.scan_iter(match=f"{spec['prefix']}*", count=1000)):
            if client.type(key) == b"string":
                total += client.strlen(key)
            if clean:
                client.unlink(key)
    store.close()
    return total


# -- the parent -----------------------------------------------------------------------------------
def run_child(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.stream_memory", "--child", kind],
        input=json.dumps(spec), text=True, capture_output=True, cwd=ROOT, env=env, timeout=7200, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{kind} child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--stores", default="s3,redis")
    parser.add_argument("--part-mib", type=int, default=8)
    parser.add_argument("--range-mib", type=int, default=8, help="the consumer's value.stream.range.bytes")
    parser.add_argument("--pairs", type=int, default=1, help="produce/raw pairs per store, run alternately")
    parser.add_argument("--backend", default=None, help="Kafka backend (default: KAFKA_TEST_BACKEND, else mock)")
    parser.add_argument("--json", help="merge the results, per store, into this file (benchmarks/results/streams.json)")
    parser.add_argument("--child", choices=["produce", "raw", "consume"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        spec = json.load(sys.stdin)
        child = {"produce": child_produce, "raw": child_raw, "consume": child_consume}[args.child]
        print(json.dumps(child(spec)))
        return 0
    results = measure(args)
    if args.json:
        write_results(Path(args.json), results)
    return 0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every store's pairs at one size: ``{"stores": {name: run}}``, each run carrying its own size and setting."""
    from gateway.testing import RedisServer, S3Server, start_kafka

    size, part, step = int(args.gib * GiB), args.part_mib * MiB, args.range_mib * MiB
    digest = expected_digest(size)
    results: dict[str, Any] = {"kind": "streams", "stores": {}}
    with (
        start_kafka(args.backend) as kafka,
        RedisServer(from_env=False) as redis_server,
        S3Server(from_env=False) as s3_server,
    ):
        env = {
            "kafka": str(kafka.version), "kafka_backend": kafka.name, "redis": redis_server.server_version(),
            "cpus": os.cpu_count(), "python": sys.version.split()[0],
        }  # fmt: skip
        s3_client = s3_server.client()
        bucket = f"stream-{uuid.uuid4().hex[:8]}"
        s3_client.create_bucket(Bucket=bucket)
        for store in args.stores.split(","):
            started, wall = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.perf_counter()
            rows: dict[str, Any] = {"produce_stream": [], "raw": [], "consumer": []}
            for pair in range(args.pairs):
                for kind in ["produce", "raw"] if pair % 2 == 0 else ["raw", "produce"]:
                    topic = f"stream-{store}-{uuid.uuid4().hex[:6]}"
                    kafka.create_topic(topic, partitions=1)
                    spec = {
                        "store": store, "size": size, "part": part, "range": step,
                        "topic": topic, "bootstrap": kafka.bootstrap_servers, "client_config": kafka.client_config,
                        "redis_url": redis_server.url, "s3_endpoint": s3_server.endpoint_url, "bucket": bucket,
                        "prefix": f"sm{uuid.uuid4().hex[:6]}",
                    }  # fmt: skip
                    _measure_one(kind, spec, rows, digest)
            results["stores"][store] = {
                "size": size, "part": part, "range": step, "pairs": args.pairs, "started": started,
                "wall_seconds": time.perf_counter() - wall, "env": env, **rows,
            }  # fmt: skip
    return results


def _measure_one(kind: str, spec: dict[str, Any], rows: dict[str, Any], digest: str) -> None:
    """One child (produce then its consumer, or the raw client), its row appended, a line printed."""
    store, size = spec["store"], spec["size"]
    row = run_child(kind, spec)
    if row["stored"] != size:
        raise RuntimeError(f"{kind} on {store} stored {row['stored']} bytes, not {size}")
    rows["produce_stream" if kind == "produce" else "raw"].append(row)
    growth, rate = row["growth_bytes"] / MiB, size / MiB / row["seconds"]
    print(f"{store:6} {kind:8} peak RSS growth {growth:8.1f} MiB  {rate:8.1f} MiB/s", flush=True)
    if kind != "produce":
        return
    read = consume_side(spec)
    read["digest_equal"] = read["sha256"] == digest
    if read["read"] != size or read["raw_read"] != size or not read["digest_equal"]:
        raise RuntimeError(f"the consumer read {read} of {size} bytes, sha256 {digest}")
    rows["consumer"].append(read)
    print(
        f"{store:6} consume  peak RSS growth {read['growth_bytes'] / MiB:8.1f} MiB  "
        f"{size / MiB / read['seconds']:8.1f} MiB/s (raw client, same ranges: "
        f"{read['raw_growth_bytes'] / MiB:.1f} MiB, {size / MiB / read['raw_seconds']:.1f} MiB/s), SHA-256 equal",
        flush=True,
    )


def write_results(path: Path, results: dict[str, Any]) -> None:
    """``results`` merged into ``path`` store by store: a run of one store keeps the other's figures."""
    merged: dict[str, Any] = {"kind": "streams", "stores": {}}
    if path.exists():
        old = json.loads(path.read_text())
        if old.get("kind") == "streams":
            merged = old
    merged["stores"].update(results["stores"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
