"""Reference payloads read as streams (``value.stream.threshold.bytes``): :class:`PayloadStream` and what feeds it.

The consumer's resolver makes one with :func:`open_stream` for an envelope
:func:`gateway.core.streams.plan.streams` chose; ranges come from the store's optional
:meth:`gateway.store.Store.get_range_into` into reused buffers, compressed frames are decoded by
:mod:`gateway.core.streams.decoding`, sealed segments are opened with the cipher
:meth:`gateway.encryption.ReferenceEncryption.cipher_for` gives.
"""

from gateway.streams._open import open_stream
from gateway.streams.payload_stream import PayloadStream

__all__ = ["PayloadStream", "open_stream"]
