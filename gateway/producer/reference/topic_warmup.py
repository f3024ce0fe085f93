"""librdkafka told about a topic when its first reference message starts, not when its envelope is queued.

A reference message's only record, its envelope, is queued after the store write. librdkafka learns of
a topic from the first record queued for it; a fresh producer has by then dropped its bootstrap
connection (it knows the brokers by id) and has no broker up, so its leader query finds "no usable
brokers" and waits for librdkafka's fast-query interval (100 ms) before it connects to the leader
(issue 42.3: a fresh producer's first Redis reference message took about 20-60 ms longer than a raw
``SET`` and record; a chunked or plain message is queued at once and never met it). Asking for the
topic's metadata when the message starts, on a worker thread (``list_topics`` releases the GIL),
connects to a broker and fills librdkafka's metadata cache while the payload is written, so the
envelope finds its leader known and connected. Once per topic per producer; the send never waits for
it, and its failure (a topic that does not exist yet, a broker down) changes nothing: the envelope
then goes the way it went before.

The same worker journals a topic's next ids ahead in the stores that journal in batches (S3, GCS,
Azure: ``Store.open_journal_batch``), when the application says which topics it will write
(``prepare_topics``/``warm_topics``): otherwise a topic's first payload waits for the batch marker's
write, which on a local S3 server costs about what the write of a 1 MB payload does. Not on the send
path: there the payload's own write opens the batch, and a marker written beside it would only race it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

log = logging.getLogger(__name__)

WARMUP_TIMEOUT_S = 5.0
"""How long the worker waits for one topic's metadata: what a close may wait for, at most, while it runs."""


class TopicWarmup:
    """Asks librdkafka (``list_topics``) for each topic the first time a reference message to it starts, or
    the first time its ``cleanup.policy`` is asked (:class:`~gateway.producer._compaction.CleanupPolicies`):
    a chunked message waits for that lookup, and its leader is then found meanwhile rather than after it."""

    def __init__(
        self,
        list_topics: Callable[[str, float], object],
        journals: Sequence[Callable[[str], object]] = (),
        timeout_s: float = WARMUP_TIMEOUT_S,
    ) -> None:
        self._list_topics = list_topics
        self._journals = tuple(journals)
        """Each store's ``open_journal_batch`` for a topic (at the time it runs); none in a peer's format."""
        self._timeout_s = timeout_s
        self._seen: set[str] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def touch(self, topic: str) -> None:
        """Start the metadata request of ``topic`` if this producer has not asked for it yet; never waits."""
        if topic in self._seen or self._closed:
            return
        self._seen.add(topic)
        self._submit(self._ask, topic)

    def ask_now(self, topic: str, timeout_s: float) -> None:
        """Ask for ``topic``'s metadata on the caller's thread (``prepare_topics``), and never again on the worker."""
        self._list_topics(topic, timeout_s)
        self._seen.add(topic)

    def journal_ahead(self, topic: str) -> Future[None] | None:
        """Start journalling ``topic``'s next ids in every store that journals in batches; never waits.

        Asked again for the same topic, a store whose batch still has ids does nothing, so a
        ``prepare_topics`` repeated after a batch's window ended opens the next one. The future
        never raises (a failure is logged: the first write then journals as it would have); None
        when there is nothing to do.
        """
        if not self._journals or self._closed:
            return None
        return self._submit(self._journal, topic)

    @staticmethod
    def wait(pending: Sequence[Future[None] | None], timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the journalling started; what is still under way goes on alone."""
        futures = [future for future in pending if future is not None]
        if futures:
            wait(futures, timeout=max(timeout_s, 0.0))

    def _submit(self, work: Callable[[str], None], topic: str) -> Future[None]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="gateway-topic-warmup")
        return self._pool.submit(work, topic)

    def _journal(self, topic: str) -> None:
        for open_batch in self._journals:
            try:
                open_batch(topic)
            except Exception as exc:  # noqa: BLE001 - only a head start: the first write journals its payload
                log.warning("ids of topic %r not journalled ahead of its first write: %s", topic, exc)

    def _ask(self, topic: str) -> None:
        try:
            self._list_topics(topic, self._timeout_s)
        except Exception as exc:  # noqa: BLE001 - only a head start: the envelope's own lookup still happens
            log.debug("metadata of topic %r not learned ahead of its first envelope: %s", topic, exc)

    def close(self) -> None:
        """Wait for a request under way (librdkafka's handle must outlive it); drop the ones not started."""
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


__all__ = ["WARMUP_TIMEOUT_S", "TopicWarmup"]
