"""The redis-py plumbing under :class:`~stores.RedisStore`: error mapping, pooled connections, packed exchanges.

The store's operations decide what to send; this module decides how a call reaches the server
and what its failure means to the producer: unreachable or refusing for now
(:class:`StoreUnavailableError`, so the policy can fall back to chunking) or a real error
(:class:`StoreError`). The packed write (:mod:`stores.redis._wire`) and the direct read
(:mod:`stores.redis._mget_reply`) run on a pooled connection under the client's retry policy, and the
connection is dropped after any error, since its later replies were not read.
"""

from __future__ import annotations

import functools
import re
import ssl
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis
from redis import exceptions as rex

from gateway.config import check_url_userinfo, mask_url
from gateway.core.buffers import BytesBuilder
from gateway.errors import ConfigurationError, StoreError, StoreUnavailableError
from stores.base import StoreMetrics
from stores.redis._mget_reply import EntryShape, ReplyReader
from stores.redis._wire import PackedTransaction, packed_command

if TYPE_CHECKING:
    from redis.client import Pipeline
    from redis.cluster import RedisCluster

_T = TypeVar("_T")

# Server replies that mean "not now" rather than "never": a failover, a replica, a full server.
_REFUSED_FOR_NOW_ERRORS = (
    rex.OutOfMemoryError,
    rex.ReadOnlyError,
    rex.TryAgainError,
    rex.ClusterDownError,
    rex.MasterDownError,
)
_REFUSED_FOR_NOW = re.compile(r"(?:^|error: )(?:OOM|LOADING|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN|BUSY)\b")


def mapped_errors(metrics: StoreMetrics, fn: Callable[[], _T]) -> _T:
    """``fn()``, with redis-py's errors counted and raised as the gateway's typed store errors."""
    try:
        return fn()
    except (rex.ConnectionError, rex.TimeoutError, rex.SlotNotCoveredError) as exc:
        metrics.add("errors")
        raise StoreUnavailableError(f"Redis is unreachable: {unreachable_reason(exc)}") from exc
    except rex.ResponseError as exc:
        metrics.add("errors")
        text = str(exc)
        if isinstance(exc, _REFUSED_FOR_NOW_ERRORS) or refused_for_now(text):
            raise StoreUnavailableError(f"Redis refuses for now ({type(exc).__name__}): {text}") from exc
        raise StoreError(f"Redis error: {text}") from exc
    except (rex.RedisError, rex.RedisClusterException) as exc:
        metrics.add("errors")
        raise StoreError(f"Redis error: {exc}") from exc


def unreachable_reason(exc: BaseException) -> str:
    """redis-py's text, prefixed with what an operator must fix when the cause is TLS or the credentials.

    redis-py reports both as connection errors: a refused password as ``AuthenticationError``, a
    certificate it cannot verify as a ``ConnectionError`` over the ``ssl.SSLError``.
    """
    if isinstance(exc, rex.AuthenticationError):
        return f"authentication failed (wrong user or password, or the ACL user is disabled): {exc}"
    seen: BaseException | None = exc
    for _ in range(5):  # the SSL error sits a link or two down redis-py's chain
        if seen is None:
            break
        if isinstance(seen, ssl.SSLError) or "[SSL" in str(seen):
            return f"TLS failed (for rediss:// give the server's CA, e.g. ?ssl_ca_certs=/path/ca.pem): {exc}"
        seen = seen.__cause__ or seen.__context__
    return str(exc)


def redis_client_from_url(url: str, **kwargs: Any) -> redis.Redis | RedisCluster:
    """A client for ``url``: a ``RedisCluster`` when the server there runs in cluster mode, else a ``redis.Redis``.

    For tools that take one ``--redis-url`` (gc, reconcile, Spark options): any node of a cluster
    then works as the URL, and the store picks its layout from the client. The probe is one
    ``INFO cluster`` on a short-lived connection. A URL redis-py cannot parse raises
    :class:`~gateway.errors.ConfigurationError` with the URL masked (redis-py's own text can quote
    part of a password that an unencoded ``/``, ``?`` or ``#`` cut short).
    """
    check_url_userinfo(url, "Redis URL")
    try:
        probe = redis.Redis.from_url(url, **kwargs)
    except ValueError as exc:
        raise ConfigurationError(f"Redis URL {mask_url(url)!r} cannot be parsed: {exc}") from None
    try:
        cluster = str(probe.info("cluster").get("cluster_enabled", 0)) == "1"
    except rex.RedisError as exc:
        raise StoreUnavailableError(f"Redis at {mask_url(url)!r} does not answer: {unreachable_reason(exc)}") from exc
    finally:
        probe.close()
    if not cluster:
        return redis.Redis.from_url(url, **kwargs)
    from redis.cluster import RedisCluster

    return RedisCluster.from_url(url, **kwargs)


def exchange(pool: Any, packed: PackedTransaction) -> None:
    """Send ``packed`` on a pooled connection and read every reply, with the client's retry policy.

    An error reply raises as redis-py's own reading does (an OOM refusal while queueing makes the
    server discard the transaction); the connection is then dropped, since its later replies were not
    read. A retried transaction writes the same keys and members again, which changes nothing.
    """

    def attempt(conn: Any) -> None:
        conn.send_packed_command(packed.items())
        read_transaction_replies(conn, packed.replies)

    on_pooled_connection(pool, attempt)


def read_transaction_replies(conn: Any, replies: int) -> None:
    """Read a packed transaction's ``replies`` (``MULTI``, each ``QUEUED``, ``EXEC``'s array); raise the first error."""
    for _ in range(replies - 1):
        conn.read_response()
    for result in conn.read_response() or ():
        if isinstance(result, Exception):
            raise result


def on_pooled_connection(pool: Any, attempt: Callable[[Any], _T]) -> _T:
    """``attempt(conn)`` on a pooled connection under the client's retry policy; the connection is
    dropped after any error (its replies may be out of step) and returned to the pool either way."""
    conn = pool.get_connection()
    try:
        return cast("_T", conn.retry.call_with_retry(lambda: attempt(conn), lambda error: conn.disconnect()))
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


@functools.cache
def connections_expose_sockets() -> bool:
    """Whether a redis-py connection keeps its socket in ``_sock``, which the direct reads receive from."""
    from redis.connection import Connection

    return "_sock" in vars(Connection())  # type: ignore[no-untyped-call]


def read_entries(pool: Any, requests: Sequence[tuple[list[str], list[int]]]) -> list[bytes | EntryShape]:
    """One MGET per ``(keys, lengths)``, sent in one write on a pooled connection; the first
    ``len(lengths)`` keys of each are received into one ``bytes``.

    A retry (the client's policy, for a connection the server closed) starts again with fresh
    values. The connection is dropped after any error, and after replies that left bytes unread.
    """
    packed = [item for keys, _ in requests for item in packed_command("MGET", *keys)]

    def attempt(conn: Any) -> list[bytes | EntryShape]:
        conn.send_packed_command(packed)
        sock = getattr(conn, "_sock", None)
        if sock is None:
            raise rex.ConnectionError("the connection has no socket after sending")
        reader = ReplyReader(sock)
        out: list[bytes | EntryShape] = []
        for keys, lengths in requests:
            builder = BytesBuilder(sum(lengths))
            shape = reader.read_entries(builder, lengths, len(keys) - len(lengths))
            out.append(shape if shape is not None else builder.build())
        if not reader.drained:
            conn.disconnect()
        return out

    return on_pooled_connection(pool, attempt)


def read_ranges_into(pool: Any, ranges: Sequence[tuple[str, int, int]], exists: str, view: memoryview) -> list[int]:
    """``GETRANGE key low high`` for each of ``ranges`` then ``EXISTS exists``, sent in one write; the ranges'
    bulk replies received back to back into ``view``. Returns each reply's length and, last, ``EXISTS``' answer.

    Replies after a short one (the payload ends there) are read past, not into ``view``: the caller
    stops at the first short one. The connection is dropped after any error, as for :func:`read_entries`.
    """
    packed = [
        item for key, low, high in ranges for item in packed_command("GETRANGE", key, str(low), str(high))
    ] + packed_command("EXISTS", exists)

    def attempt(conn: Any) -> list[int]:
        conn.send_packed_command(packed)
        sock = getattr(conn, "_sock", None)
        if sock is None:
            raise rex.ConnectionError("the connection has no socket after sending")
        reader = ReplyReader(sock)
        lengths: list[int] = []
        filled = 0
        short = False
        for _, low, high in ranges:
            wanted = high - low + 1
            target = view[filled : filled + wanted] if not short else view[:0]
            length = reader.read_bulk_into(target) or 0
            lengths.append(length)
            if not short:
                filled += min(length, wanted)
                short = length != wanted
        lengths.append(reader.read_integer())
        if not reader.drained:
            conn.disconnect()
        return lengths

    return on_pooled_connection(pool, attempt)


def get_command(key: str, pipe: Pipeline) -> object:
    return pipe.get(key)


def zrem_command(key: str, members: list[str], pipe: Pipeline) -> object:
    return pipe.zrem(key, *members)


def pending_before_command(key: str, older_than_ms: int, pipe: Pipeline) -> object:
    return pipe.zrangebyscore(key, "-inf", f"({older_than_ms}", withscores=True)


def zcard_command(key: str, pipe: Pipeline) -> object:
    return pipe.zcard(key)


def is_cluster(client: object) -> bool:
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def cluster_transactions() -> bool:
    import redis.cluster

    return hasattr(redis.cluster, "TransactionStrategy")


def client_decodes(client: Any, cluster: bool) -> bool:
    if cluster:
        kwargs = client.get_connection_kwargs()
    else:
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    return bool(kwargs.get("decode_responses"))


def refused_for_now(text: str) -> bool:
    # redis-py reports a command refused inside MULTI as "Command # n (...) of pipeline caused error: <reply>".
    return _REFUSED_FOR_NOW.search(text) is not None
