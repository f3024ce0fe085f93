"""Runs of plain records handed out in bulk: what keeps ``consume()`` close to librdkafka's own speed.

Most records are small and plain. For them the consumer's work is to check that they are plain
and to note the offset delivered; doing that once per run of records from one partition, with the
cheapest sufficient test (:func:`~gateway.protocol.classify.is_plainly_plain`), instead of feeding
each record through the pipeline, takes the per-record cost down to a few attribute reads. A record
the test cannot vouch for ends the run and takes the full path.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from gateway.pipeline import ConsumerPipeline
from gateway.protocol.classify import is_plainly_plain


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
