"""What is left of each target when a run misses it: the work that stays, measured apart from the suite.

The report prints a target's paragraph only when the run missed it; the profiles of the same
section show the run's own numbers. The figures here come from side-by-side scripts on the same
2-core machine (medians of hundreds to thousands of calls), which is why they are stated with what
was compared.
"""

from __future__ import annotations

WHAT_IS_LEFT: dict[str, str] = {
    "chunked.produce": (
        "Each segment is built once (header and chunk joined into one `bytes`, 2-10 µs for 100 KB) and "
        "librdkafka copies it once; the `raw.segments` baseline had its segments built before its clock "
        "started. What shows at 100 KB is the Python work around each message: with librdkafka's `produce` "
        "replaced by a no-op, `HybridProducer.produce` of a 100 KB chunked message took 25.9 µs (38.2 µs "
        "before the segment was joined rather than built through `ctypes`, the message id drawn without "
        "`uuid.UUID`'s checks and the timestamp stamped without copying the message), against 55-66 µs for "
        "librdkafka's `produce` of the same bytes, on the embedded cluster. No single call stands out in "
        "the profile (the route, the id, the `_lm` and `_t` headers, the size checks, the delivery fold, "
        "metrics). From 1 MB up the work per byte is the copy, and the cells swing between runs: the last "
        "seven full runs read 0.85, 0.99, 0.88, 1.01, 0.98, 1.02 and 0.97 at 100 KB, 0.90, 1.25, 1.14, 0.96, "
        "0.88, 0.99 and 0.86 at 1 MB, and 0.99, 1.04, 0.94, 0.93, 1.02, 0.91 and 0.93 at 10 MB. Side by side "
        "on the broker with nothing else in between (11 repetitions, order alternating, fresh topics) the "
        "route read 1.05 of `raw.segments` at 1 MB (0.75-1.75 per repetition) and 0.98 at 10 MB "
        "(0.75-1.17); at 100 KB (5 repetitions, twice) 0.99-1.02."
    ),
    "chunked.consume": (
        "Each segment record costs Python work a raw read does not: the segment and `_lm` headers are checked "
        "and the segment decoded into a typed value, the offset is tracked for safe commits, the delivered "
        "`_lm` header is written, and the payload is copied once out of the record, behind its header. For "
        "one-segment messages of 500 B on the embedded cluster (medians of 7) a record took 12.9 µs before "
        "this round and 7.9 µs after (a one-segment message in a partition with nothing pending is tracked "
        "as a plain record is; a payload-header segment's `_lm` header is checked, not decoded; the typed "
        "values are built through their slots), against 1.6 µs for a raw `poll()` and 2.9 µs for the least a "
        "reader of such segments must do in Python (both headers unpacked with `struct`, the payload sliced "
        "out, value and headers set; no typed values, no offset tracking). At 100 KB, side by side on the "
        "broker (13 repetitions of 1 000 messages, order alternating, twice), that least reader read 1.08 "
        "and 0.86 of `raw.segments` and the route 0.92 and 0.95 (per repetition 0.50-1.80): at this size "
        "the route is within the noise of a reader with no bookkeeping at all. From 1 MB up the work per "
        "byte is one copy of each segment into the message. What swings at 100 MB is that copy: timed "
        "inside the consumer on the broker (22 repetitions of 3 messages), appending 300 MB of segments "
        "took 61-73 ms in the 15 repetitions where the route read 1.05-1.73 of `raw.segments`, and 88-381 ms "
        "in the three where it read 0.34-0.75 (up to 115 ms of CPU, with 10 000-13 000 page faults system-wide "
        "against about 2 800), while the time spent in librdkafka's `poll` and `consume` stayed "
        "within 40-100 ms. "
        "Fetching was tuned first: with `fetch.queue.backoff.ms` 10 the route read 0.81-0.90 side by side "
        "(9-15 repetitions), with 3 ms 0.99-1.23, so the default is 3 ms, with a 12 MiB queue (1.03) so "
        "that the faster refill does not hold more of a 10 MB message. Full runs swing accordingly: at "
        "100 MB the last seven read 0.48 and 0.47 with 10 ms, then 1.02, 0.75, 0.53, 0.74 and 0.65; at 10 MB "
        "the last six 0.96, 0.93, 0.94, 0.88, 0.89 and 1.19."
    ),
    "redis.produce": (
        "The ceiling is one bare `SET`. The gateway writes the payload, its pending mark and its index entry "
        "in one `MULTI`/`EXEC` (packed without redis-py's pipeline): at 100 KB the transaction took 183-200 µs "
        "against 160 µs for the bare `SET` on the same server, the difference being the server's work on two "
        "sorted sets and four more replies. It also hashes the payload (BLAKE3, 5.5-7 GB/s, in a second thread "
        "that competes with redis-server for the two cores), produces the envelope, and clears the pending "
        "marks after acknowledgement. Reading the transaction's replies without redis-py's parser saved a "
        "further 7 µs of 183 (measured, not adopted). The journal and the checksum are what make a crash "
        "recoverable and a payload verifiable, so they stay. What wins the time back is not waiting: with "
        "`reference.write.window` above 1 (8 here) the next writes go out while the server answers earlier "
        "ones, which meets the target at 100 KB (0.54 with a window of 1). From 1 MB up the producer is "
        "working rather than waiting. Timed per 1 MB message on the broker (3 repetitions): sending took "
        "737-1038 µs, hashing 337-416 µs (BLAKE3 alone runs at 6 GB/s, 170 µs a MB; here it shares two "
        "cores with redis-server and the broker), confirming 81-156 µs and queueing the envelope 76-128 µs, "
        "against 1.3-2.0 ms per message for the baseline; a window of 1, 2 and 8 gave 0.61, 0.68 and 0.75. "
        "On the embedded cluster, with no broker process on the cores, the same producer reached 1.30 of the "
        "baseline at 1 MB (1.45 with the hash stubbed out), 0.94-1.02 at 10 MB (1.11-1.16) and 0.77 at 100 MB "
        "(0.91): what is left is the checksum's CPU, and the checksum is what lets a consumer verify the payload. "
        "At 10 MB on the broker, counted in CPU rather than time (15 repetitions of 4 messages, route and ceiling "
        "alternating): the route spent 10.0 ms of process CPU per message against 4.4 ms for the ceiling, and "
        "`perf` put the difference in BLAKE3 (4.7 ms per 10 MB on these shared cores) while the socket copy was "
        "the same on both sides, so with no free core the hash cannot hide beside the write. It did not even "
        "overlap its own write: begun after the `sendall` (which returns only once the server has read most of "
        "10 MB), it ran beside the next message's, and a lone message or a burst's last paid both; it now starts "
        "before the send. A fresh producer's first message also waited for the topic's `cleanup.policy` (which a "
        "store without a TTL does not need) and, its envelope being the first record for the topic, for "
        "librdkafka's leader query: a fresh producer's first 1 MB reference message took 67 ms longer than a raw "
        "producer's first `SET` and record in the same repetition (median of 21, fastest 67 ms in all), 11 ms "
        "(fastest 17 ms) once both happen off the send path. "
        "Profiled in every thread (150 messages of 1 MB on the broker, digest stubbed out), the producing thread "
        "waited for the write window's lock at every message: each write woke the window's linger thread, "
        "which took the lock to recompute a wake-up time only the first write of a burst changes. Woken for "
        "that write alone, the route's process CPU per 1 MB message fell from 1.40 to 1.13 ms (1.07 to 0.80 "
        "with the digest stubbed; the ceiling 0.53-0.67). `python -m benchmarks.digest_share` runs the route "
        "beside its ceiling with and without the digest, on both ends: at 1 MB (7 repetitions of 150 "
        "messages) the route read 0.75-0.80 of the ceiling and 0.86-1.00 without the digest; at 10 MB 0.89 "
        "and 0.99. What is left is the digest's CPU on cores the broker and redis-server also use."
    ),
    "redis.consume": (
        "Payloads under 512 KiB are fetched ahead in groups on one thread (one pipelined request per group, "
        "each reply received straight into its value), larger ones by 4 workers, one request each, and all "
        "are verified with BLAKE3 before they are handed out; the baseline does a bare `GET` without a "
        "checksum. Side by side on one server, a group read of 100 KB payloads took 71 µs per payload against "
        "132 µs through redis-py's pipeline. On the broker (medians of 7), 1 MB payloads read in groups came "
        "to 0.79-0.81 of the baseline, with the consumer waiting for the group thread (the profile's "
        "`acquire`), and 0.99-1.02 through the workers, hence the 512 KiB line; at 100 KB the group is what "
        "keeps the route near the baseline, one round trip per group instead of one per payload. "
        "Once the byte budget was full, groups went out one payload per round trip (0.68 at 100 KB in one "
        "full run with the 32 MB budget); a group now waits until the budget has room for all of it (1.04 "
        "side by side). The last three full runs read 0.87, 0.74 and 0.83 at 100 KB, with the baseline "
        "spreading over 523-983 MB/s where the route stayed within 414-594; side by side on the broker (11 "
        "repetitions of 1 000 payloads, order alternating) the route read 0.95 of the baseline (0.57-1.12 "
        "per repetition), and the code before this round's changes 0.93 (0.68-1.08). "
        "At 1 MB what stays is the check itself: `python -m benchmarks.digest_share` (7 repetitions of 150 "
        "payloads, route and ceiling alternating on the broker) read 0.74-0.89 of the ceiling with it and "
        "0.95-0.98 with the digest stubbed out on both ends; the consumer's CPU per payload was 1.40-1.67 ms "
        "with it, 1.00-1.13 ms without and 0.67-0.87 ms for the ceiling. Without the check a consumer would "
        "hand out a swapped or damaged payload as the right one."
    ),
    "s3.produce": (
        "One `PutObject` per payload, like the baseline, carrying the payload's SHA-256 (computed by the "
        "gateway, 1.25-1.65 GB/s), which S3 checks and keeps as metadata, and a BLAKE3 for the envelope "
        "(in line below 1 MiB, about 0.2 ms a MB; beside the upload above); the pending journal costs one "
        "more PUT per 64 payloads, and `prepare_topics` (which every variant calls before its clock starts, "
        "as an application may at start-up) writes a topic's first one ahead: in the clouds suite's runs "
        "before and after that change (2026-11-29 04:55 and 07:59 UTC, 9 repetitions of 20 payloads each) "
        "the S3, GCS and Azure routes read 0.85, 0.87 and 0.88 of their ceilings at 1 MB, then 0.91, 0.95 "
        "and 0.93. "
        "Above 64 MiB the "
        "upload is multipart, 8 MiB parts four at a time, where the baseline makes one PUT: on AWS one stream "
        "carries roughly 100 MB/s, so parallel parts are the faster way, but the moto server is one Python "
        "process on two cores, where a single PUT of 100 MB took 556 ms against 722 ms for the parts. "
        "`multipart_threshold` moves that line for a deployment that measures otherwise."
    ),
    "s3.consume": (
        "One `GetObject`, like the baseline, read in 1 MiB pieces through urllib3 into the final value and "
        "verified against the envelope's digest before it is handed out; the baseline does not verify. With a "
        "SHA-256 envelope (S3's default before BLAKE3 became it) the check took about 67 ms of a 100 MB payload "
        "and the route read 0.61 of the baseline side by side on the broker (5 repetitions); with BLAKE3, now "
        "the default, 18 ms and 1.25. Hashing beside the read does not win it back on two cores, where the moto "
        "server, the read and the hash all want a core: for 100 MB on moto (medians of 6), a bare `GetObject` "
        "took 157 ms, reading then hashing with SHA-256 188 ms, hashing each 1 MiB piece as it arrived 196 ms. "
        "That is the read below `parallel_read_bytes` (64 MiB). From there on the store asks the size and reads "
        "8 MiB ranges 4 at a time (one reader for S3, GCS and Azure), which pays on S3 itself, where one stream "
        "carries about 100 MB/s, and not on the moto server, which copies the whole object for every ranged "
        "`GetObject`: timed inside the store (2026-11-29), a 100 MB read took 1.08-1.36 s as 12 ranges of "
        "0.33-0.38 s each with 4 in flight (0.13 s for the first alone, 67 MB/s), against 0.21-0.23 s for one "
        "bare `GetObject` of the whole object; the code before the three clouds shared one reader read 100 MB "
        "in one `GetObject` (0.15-0.32 s). So the 100 MB cell measures moto's ranges, not the route."
    ),
    "memory.consumer.chunked": (
        "The consumer holds the message being assembled (one copy) and the fetched batch of raw segments "
        "(`fetch.batch.bytes`); librdkafka prefetches up to `queued.max.messages.kbytes` (12 MiB here) beside "
        "it. With an 8 MB batch a 10 MB reader's peak changed from pass to pass, by about a message: measured "
        "apart on the broker (20 messages of 10 MB, 5 passes, four times), the route held 31-51 MB against "
        "28-44 MB for the raw segment reader, 0.19-1.14 of a message more (medians), and two full runs read "
        "1.56 and 1.44. With 2 MB, now the default, it held 33.9-35.7 MB, 0.50-0.55 more, and read 10 MB "
        "messages at 1.24 of the raw reader against 1.07 with 8 MB in the same runs (11 repetitions); at "
        "100 KB, 1 MB and 100 MB the two read alike within the noise."
    ),
    "memory.consumer.redis": (
        "Payloads fetched ahead are held until handed out, within `reference.fetch.budget.bytes` (32 MB; it was "
        "64 MB). Measured apart on the broker with 10 MB payloads (memory: medians of 3 passes, in payloads "
        "beyond the raw segment reader; rate: medians of 5, ratio to the baseline): a 64 MB budget held 1.60 "
        "(Redis) and 1.58 (S3) and read at 2.62 and 1.14; 40 MB held 0.99 and 1.13 at 2.51 and 1.17; 32 MB "
        "held 0.10 and 0.34 at 2.66 and 1.17. A 16 MB budget (one payload ahead) cost rate: S3 fell to 0.80."
    ),
    "memory.consumer.s3": (
        "Payloads fetched ahead are held until handed out, within `reference.fetch.budget.bytes` (32 MB); see "
        "`memory.consumer.redis` for what a smaller budget cost."
    ),
    "memory.producer.chunked": (
        "What is above `raw.record` is what librdkafka holds for 13 records instead of one, whoever sends them. "
        "Measured apart on the broker (20 messages of 10 MB, 3 passes, peak growth in MB): `raw.record` "
        "199.7-200.0; a raw `Producer` sending the same 260 segment records, built before the measurement: "
        "200.7-200.9 without a delivery callback and 201.5-201.8 with one (per record or one for the whole "
        "producer alike, about 3.3 KB more per record), the `_lm` and `_t` headers 0.05 at most; the chunked "
        "route 201.4-201.6. So the segments alone cost 0.17 of a message at 10 MB, more than the target, even "
        "when raw confluent-kafka sends them; the route needs each segment's delivery report to report the "
        "message once, and the one segment it builds at a time in Python (0.8 MB, traced with tracemalloc) "
        "does not raise the peak above the raw sender's. The `raw.segments` row (no delivery callbacks) shows "
        "what the segment records themselves cost in each run."
    ),
    "passthrough.poll": (
        "`poll()` fetches 500 records at a time; a batch proven plain as a whole (C-level passes over error, "
        "value, headers, partition and topic) is then handed out by count alone, one `popleft` per call, and "
        "its offsets are noted once, when something asks. A raw `poll()` is one C call per record. What is left "
        "is the Python call itself and the proof of each batch (160-190 ns a record on the broker, see "
        "`passthrough.consume`); a record of a batch that fails the proof is tested and noted one by one "
        "(about 530 ns more per record on the embedded cluster)."
    ),
    "passthrough.consume": (
        "A `consume(500)` proves the fetched batch all plain and of one partition with C-level passes over "
        "it (error, value, headers, partition and topic of every record), notes one offset for it and returns "
        "the list librdkafka fetched; a raw `consume` does neither. Without the proof a segment or an envelope "
        "could be handed out as a plain record. Timed inside the gateway on the broker (3 runs of 100 000 "
        "records): the fetch took 706-839 ns per record, about what a raw `consume(500)` takes, the proof "
        "160-187 ns and the rest about 30 ns. With the proof stubbed out (not shippable) the same consumer "
        "read 0.92-0.93 of the baseline where the real one read 0.81, in the same runs. Each proof pass is one "
        "librdkafka accessor call per record (13-17 ns apart on the embedded cluster, more on two cores shared "
        "with the broker), so a proof that reads each record's five fields from Python tops out near 0.85."
    ),
}


def what_is_left(missed: list[str]) -> list[str]:
    """Markdown lines for the missed target ids that have an explanation, in the order given."""
    lines: list[str] = []
    for target in missed:
        text = WHAT_IS_LEFT.get(target)
        if text is not None:
            lines += [f"- **`{target}`**: {text}"]
    return lines


__all__ = ["WHAT_IS_LEFT", "what_is_left"]
