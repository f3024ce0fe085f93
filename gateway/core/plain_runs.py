"""Runs of plain records handed out in bulk: what keeps ``consume()`` close to librdkafka's own speed.

Most records are small and plain. For them the consumer's work is to check that they are plain
and to note the offset delivered; doing that once per run of records from one partition, with the
cheapest sufficient test (:func:`~gateway.protocol.classify.is_plainly_plain`), instead of feeding
each record through the pipeline, takes the per-record cost down to a few attribute reads. A record
the test cannot vouch for ends the run and takes the full path.
"""

from __future__ import annotations

from collections import deque
from itertools import islice, repeat, starmap
from typing import Any

from gateway.core.pipeline import ConsumerPipeline
from gateway.core.plain_deliveries import BATCH_FROM, plain_partition
from gateway.protocol.classify import is_plainly_plain
from gateway.protocol.records import TopicPartitionKey

__all__ = ["BATCH_FROM", "drop_head", "take_plain_batch", "take_plain_run"]


def take_plain_run(raw: deque[Any], pipeline: ConsumerPipeline, out: list[Any], limit: int) -> int:
    """Move the plain records at the head of ``raw`` that share its first record's partition to ``out``.

    Stops at ``limit`` records in ``out``, at a record of another partition, at an error event and
    at any record that is not plainly plain; returns how many were moved (0 when the first record
    needs the full path, which the caller then gives it).
    """
    if not raw or len(out) >= limit:
        return 0
    first = raw[0]
    if first.error() is not None or not is_plainly_plain(first.value(), first.headers()):
        return 0
    topic, partition = first.topic(), first.partition()
    tp = (topic, partition)
    if not pipeline.plain_run_open(tp, first.offset()):
        return 0
    popleft, append = raw.popleft, out.append
    last = popleft()
    append(last)
    moved, room = 1, limit - len(out)
    while room and raw:
        msg = raw[0]
        if (
            msg.partition() != partition
            or msg.error() is not None
            or not is_plainly_plain(msg.value(), msg.headers())
            or msg.topic() != topic
        ):
            break
        last = popleft()
        append(last)
        moved += 1
        room -= 1
    pipeline.plain_run_delivered(tp, last.offset(), moved)
    return moved


def take_plain_batch(raw: deque[Any], pipeline: ConsumerPipeline, out: list[Any], limit: int) -> int:
    """Move the first ``limit - len(out)`` records of ``raw`` to ``out`` if all of them are plain and of one partition.

    All or nothing: returns how many were moved, 0 when any record needs another look (the caller
    then goes on with :func:`take_plain_run`).
    """
    n = min(limit - len(out), len(raw))
    if n < BATCH_FROM:
        return 0
    whole = n == len(raw)
    head: deque[Any] | list[Any] = raw if whole else list(islice(raw, n))  # the whole queue is read in place
    tp = _one_plain_run(head, pipeline)
    if tp is None:
        return 0
    last = head[-1]
    out.extend(head)
    if whole:
        raw.clear()
    else:
        drop_head(raw, n)
    pipeline.plain_run_delivered(tp, last.offset(), n)
    return n


def drop_head(raw: deque[Any], n: int) -> None:
    """``n`` poplefts without a Python loop."""
    deque(starmap(raw.popleft, repeat((), n)), maxlen=0)


def _one_plain_run(head: deque[Any] | list[Any], pipeline: ConsumerPipeline) -> TopicPartitionKey | None:
    """The partition of ``head`` when every record in it is plain, of that partition, and may run; else None."""
    tp = plain_partition(head)
    if tp is None or not pipeline.plain_run_open(tp, head[0].offset()):
        return None
    return tp
