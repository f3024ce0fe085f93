"""Making the :class:`~gateway.streams.payload_stream.PayloadStream` of an envelope whose payload is streamed.

The resolver calls :func:`open_stream` in the record's turn, for an envelope
:func:`gateway.core.streams.plan.streams` chose: a sealed payload's data key is unwrapped here (a
missing key is the record's error, as when read whole), nothing of the payload is read yet. A gzip
or zstd payload is decoded as its ranges arrive; an lz4 one, a compressed and sealed one, or one in
a store without ranged reads is read whole by ``read_whole`` (checked as any payload) and served
from memory: see :mod:`gateway.streams._sources`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import partial

from gateway.core.streams.decoding import DECODE_STEP, decodes_as_stream
from gateway.core.streams.plan import StreamSettings, range_step
from gateway.encryption import ReferenceEncryption
from gateway.errors import PayloadStreamIntegrityError
from gateway.protocol.envelope import Envelope
from gateway.protocol.payload_encoding import stored_bound
from gateway.store import Store
from gateway.streams._ranges import RangeFetcher
from gateway.streams._sources import CompressedSource, RangedSource, StreamSource, WholeSource
from gateway.streams.payload_stream import PayloadStream


def open_stream(
    key: Hashable,
    envelope: Envelope,
    store: Store,
    *,
    settings: StreamSettings,
    encryption: ReferenceEncryption,
    read_whole: Callable[[], bytes],
) -> PayloadStream:
    """The stream of ``envelope``'s payload in the record ``key`` names."""
    codec = envelope.compression
    if not store.reads_ranges or (
        codec is not None and (envelope.encryption is not None or not decodes_as_stream(codec))
    ):
        payload = read_whole()
        return PayloadStream(WholeSource(payload), len(payload), key)
    holder: list[PayloadStream] = []

    def fail(message: str) -> PayloadStreamIntegrityError:
        return holder[0].integrity_error(message)

    read_into = partial(store.get_range_into, envelope.locator)
    step = range_step(envelope, settings.range_bytes)
    source: StreamSource
    if codec is not None:
        bound = stored_bound(codec, envelope.size)
        fetcher = RangeFetcher(read_into, None, step, settings.read_ahead, fail, bound)
        source = CompressedSource(envelope, fetcher, min(step, DECODE_STEP), fail)
    else:
        cipher = encryption.cipher_for(envelope, store) if envelope.encryption is not None else None
        fetcher = RangeFetcher(read_into, envelope.size, step, settings.read_ahead, fail)
        source = RangedSource(envelope, fetcher, cipher, fail)
    stream = PayloadStream(source, envelope.payload_size, key)
    holder.append(stream)
    return stream
