"""Hostile record streams for the consumer pipeline, and a long-run driver (issue 13, build item 6).

A stream mixes valid messages (plain, chunked with value or header-only segments, reference
envelopes) with hostile records (random bytes, mutated segments and envelopes, garbage ``_lm``,
``_so``, ``_t`` and ``_gw.ref`` headers), interleaved across two partitions with each message's
segments in order. :func:`check_stream` feeds one stream through a
:class:`~gateway.core.pipeline.ConsumerPipeline` and checks what must hold whatever the input:

* the pipeline raises nothing; a record it cannot use comes back as an event holding that
  record, with a typed :class:`~gateway.errors.GatewayError` (the consumer raises that error
  with ``kafka_message`` set to the record);
* every valid message is delivered exactly once, with its value (or envelope);
* memory stays bounded: assembler bytes (bookkeeping included) within the capacity, tracker
  entries within its per-partition bound.

The test suite runs it under hypothesis (tests/unit/core/test_fuzz_pipeline.py); for a long run::

    PYTHONPATH=. python -m tests.fuzzing --inputs 1000000 --seed 1 [--hostile-share 0.9]
"""

from __future__ import annotations

import argparse
import random
import resource
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from gateway.core.assembler import MessageAssembler
from gateway.core.offsets import DeliveredOffsetTracker
from gateway.core.pipeline import (
    ChunkCompleted,
    Event,
    InvalidRecord,
    MessageDropped,
    PlainMessage,
    ReferenceToResolve,
)
from gateway.errors import GatewayError
from gateway.protocol import split
from gateway.protocol.envelope import ENVELOPE_HEADER, Envelope, encode_envelope, envelope_header
from gateway.protocol.headers import LM_HEADER, SAFE_OFFSET_HEADER, TIMESTAMP_HEADER, Headers
from gateway.protocol.records import Record, TopicPartitionKey
from tests.pipelines import InspectedPipeline

PARTITIONS: tuple[TopicPartitionKey, ...] = (("t", 0), ("t-mirror", 0))
CAPACITY = 4_000_000
MAX_TRACKED = 50
RESERVED = (LM_HEADER, SAFE_OFFSET_HEADER, TIMESTAMP_HEADER, ENVELOPE_HEADER)


@dataclass(frozen=True, slots=True)
class Item:
    """One record to feed; ``expect`` names the valid message it completes (``None``: no promise)."""

    tp: TopicPartitionKey
    value: bytes | None
    headers: Headers | None
    expect: str | None = None
    whole: bytes | None = None
    """A chunked message's value, on its last segment."""


@dataclass
class Outcome:
    inputs: int = 0
    events: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    delivered_valid: int = 0
    max_accounted_bytes: int = 0
    max_tracker_entries: int = 0


def _valid_plain(rng: random.Random, tag: str) -> bytes:
    # a first byte in 1..0x7f other than ESC is neither a segment nor an envelope, for LinkedIn and us
    first = rng.choice([b for b in range(1, 0x80) if b != 0x1B])
    return bytes([first]) + tag.encode() + rng.randbytes(rng.randint(0, 64))


def _envelope(rng: random.Random) -> bytes:
    data = rng.randbytes(rng.randint(1, 256))
    return encode_envelope(
        Envelope.for_payload(data, store="redis", locator=f"gw/{uuid.uuid4()}", message_id=uuid.uuid4())
    )


def _chunked(rng: random.Random) -> tuple[bytes, list[tuple[bytes, Headers]]]:
    value = rng.randbytes(rng.randint(2, 3000))
    records = split(
        "t",
        None,
        1,
        uuid.uuid4(),
        b"k",
        value,
        rng.randint(len(value) // 40 + 1, len(value) // 2 + 1),
        [],
        header_only=rng.random() < 0.3,
    )
    return value, [(bytes(r.value or b""), list(r.headers)) for r in records]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        action = rng.randrange(4)
        if action == 0 and out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        elif action == 1 and out:
            del out[rng.randrange(len(out)) :]
        elif action == 2:
            out[rng.randrange(len(out) + 1) : 0] = rng.randbytes(rng.randint(1, 8))
        elif out:
            i = rng.randrange(len(out))
            out[i : i + 8] = rng.randbytes(8)
    return bytes(out)


def _garbage_headers(rng: random.Random, base: Headers | None = None) -> Headers:
    headers = list(base or [])
    for _ in range(rng.randint(0, 3)):
        name = rng.choice((*RESERVED, "app"))
        if rng.random() < 0.5 and headers:
            i = rng.randrange(len(headers))
            headers[i] = (headers[i][0], _mutate(rng, headers[i][1] or b""))
        else:
            headers.append((name, rng.randbytes(rng.choice([0, 1, 8, 24, 25, 29, 40]))))
    return headers


def _hostile(rng: random.Random, tp: TopicPartitionKey) -> Item:
    kind = rng.randrange(6)
    if kind == 0:
        return Item(tp, rng.randbytes(rng.randint(0, 80)), _garbage_headers(rng))
    if kind == 1:  # a mutated segment (its own message id, so it cannot touch a valid message)
        _, records = _chunked(rng)
        value, headers = rng.choice(records)
        return Item(tp, _mutate(rng, value), _garbage_headers(rng, headers) if rng.random() < 0.5 else headers)
    if kind == 2:
        return Item(tp, _mutate(rng, _envelope(rng)), [envelope_header()] if rng.random() < 0.7 else None)
    if kind == 3:  # a tombstone with reserved headers
        return Item(tp, None, _garbage_headers(rng))
    if kind == 4:  # a lone segment of a message whose other segments never come
        _, records = _chunked(rng)
        value, headers = records[-1]
        return Item(tp, value, headers)
    return Item(tp, b"\x00" * rng.randint(0, 40), [(LM_HEADER, rng.randbytes(rng.choice([25, 29])))])


def stream(rng: random.Random, size: int, hostile_share: float = 0.5) -> list[Item]:
    """About ``size`` records: valid messages and hostile records, interleaved, each message in order."""
    queues: list[list[Item]] = []
    total = 0
    while total < size:
        tp = rng.choice(PARTITIONS)
        if rng.random() < hostile_share:
            queues.append([_hostile(rng, tp)])
        else:
            kind = rng.randrange(3)
            tag = f"m{total}"
            if kind == 0:
                queues.append(
                    [Item(tp, _valid_plain(rng, tag), [("app", b"1")] if rng.random() < 0.3 else None, expect=tag)]
                )
            elif kind == 1:
                value = _envelope(rng)
                queues.append([Item(tp, value, [envelope_header()], expect=tag)])
            else:
                value, records = _chunked(rng)
                items = [Item(tp, v, h) for v, h in records]
                items[-1] = Item(tp, items[-1].value, items[-1].headers, expect=tag, whole=value)
                queues.append(items)
        total += len(queues[-1])
    out: list[Item] = []
    while queues:
        i = rng.randrange(min(len(queues), 8))  # a window keeps each message within the expiry gap
        out.append(queues[i].pop(0))
        if not queues[i]:
            queues.pop(i)
    return out


def new_pipeline() -> InspectedPipeline:
    pipeline = InspectedPipeline(
        MessageAssembler(CAPACITY, 1000, max_message_bytes=CAPACITY // 2), DeliveredOffsetTracker(MAX_TRACKED)
    )
    for tp in PARTITIONS:
        pipeline.commits.load_commit(tp, None, None)
    return pipeline


def check_stream(
    items: list[Item],
    pipeline: InspectedPipeline | None = None,
    outcome: Outcome | None = None,
    offsets: dict[TopicPartitionKey, int] | None = None,
) -> Outcome:
    """Feed ``items``; raise AssertionError when a property breaks. Offsets continue across calls."""
    pipeline = pipeline or new_pipeline()
    outcome = outcome or Outcome()
    offsets = offsets if offsets is not None else {}
    delivered: Counter[str] = Counter()
    for item in items:
        offset = offsets.get(item.tp, 0)
        offsets[item.tp] = offset + 1
        record = Record(offset, b"k", item.value, item.headers)
        outcome.inputs += 1
        try:
            events = pipeline.feed(item.tp, record)
        except Exception as exc:
            # The pipeline reports, it does not raise: an exception here would leave the consumer
            # half-way through its bookkeeping (as issue 13's tombstone did).
            raise AssertionError(f"feed raised {type(exc).__name__}: {exc} for {item}") from exc
        for event in events:
            _check_event(event, record, item, delivered, outcome)
        accounted = pipeline.assembler.accounted_bytes
        entries = pipeline.tracker.size()
        assert accounted <= pipeline.assembler.capacity, f"assembler holds {accounted} > capacity"
        assert entries <= pipeline.tracker.max_entries, f"tracker holds {entries} entries"
        outcome.max_accounted_bytes = max(outcome.max_accounted_bytes, accounted)
        outcome.max_tracker_entries = max(outcome.max_tracker_entries, entries)
    wanted = [i.expect for i in items if i.expect is not None]
    missing = [tag for tag in wanted if delivered[tag] != 1]
    assert not missing, f"valid messages not delivered exactly once: {missing[:5]} ({delivered.most_common(3)})"
    outcome.delivered_valid += len(wanted)
    return outcome


def _check_event(event: Event, record: Record, item: Item, delivered: Counter[str], outcome: Outcome) -> None:
    outcome.events[type(event).__name__] += 1
    if isinstance(event, (InvalidRecord, MessageDropped)):
        assert event.record is record, "an error event names the record being fed"
        if event.exception is not None:
            assert isinstance(event.exception, GatewayError)
            outcome.errors[type(event.exception).__name__] += 1
        return
    if isinstance(event, ReferenceToResolve) and event.exception is not None:
        assert isinstance(event.exception, GatewayError) and event.record is record
        outcome.errors[type(event.exception).__name__] += 1
    assert event.record is record
    if item.expect is None:
        return
    delivered[item.expect] += 1
    if isinstance(event, ChunkCompleted):
        assert event.value == item.whole
    elif isinstance(event, ReferenceToResolve):
        assert event.envelope is not None, event.error
    else:
        assert isinstance(event, PlainMessage) and event.value == item.value


def long_run(inputs: int, seed: int, hostile_share: float = 0.5, chunk: int = 2000) -> tuple[Outcome, float, int]:
    """``inputs`` records in streams of ``chunk``, through one long-lived pipeline (state carries over)."""
    rng = random.Random(seed)
    pipeline = new_pipeline()
    outcome = Outcome()
    offsets: dict[TopicPartitionKey, int] = {}
    started = time.perf_counter()
    while outcome.inputs < inputs:
        check_stream(stream(rng, min(chunk, inputs - outcome.inputs), hostile_share), pipeline, outcome, offsets)
    elapsed = time.perf_counter() - started
    max_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return outcome, elapsed, max_rss_kib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hostile-share", type=float, default=0.5, help="share of hostile records (0..1)")
    args = parser.parse_args()
    outcome, elapsed, rss = long_run(args.inputs, args.seed, args.hostile_share)
    lines = [
        f"inputs: {outcome.inputs}",
        f"valid messages delivered exactly once: {outcome.delivered_valid}",
        f"time: {elapsed:.1f} s ({outcome.inputs / elapsed:,.0f} inputs/s)",
        f"max RSS: {rss / 1024:.1f} MiB",
        f"max assembler accounted bytes: {outcome.max_accounted_bytes} (capacity {CAPACITY})",
        f"max tracker entries per partition: {outcome.max_tracker_entries}",
        "events: " + ", ".join(f"{k}={v}" for k, v in sorted(outcome.events.items())),
        "errors: " + ", ".join(f"{k}={v}" for k, v in sorted(outcome.errors.items())),
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
