"""One ``bytes`` of a known size, filled piece by piece: a large message is held once, not twice.

Joining the chunks of a chunked message at the end (``b"".join``) holds the chunks and the joined
value at the same time: two copies of the message at the peak. Copying each chunk into the final
value as it arrives, and letting the record it came from go, holds one. Python has no public way to
fill a ``bytes`` after creating it, but CPython's C API creates one with room and no content
(``PyBytes_FromStringAndSize(NULL, n)``), which is how C code builds every large ``bytes``: it may
be written until it is first shared. :class:`BytesBuilder` does exactly that through ``ctypes``,
and hands the object out only when every byte is written. Where that is not possible (another
Python implementation, or ``ctypes`` missing) it falls back to a ``bytearray`` and one final
``bytes()`` copy: the same value, at the old peak.

Untouched pages of a large allocation are not resident, so a builder for an N-byte message costs
what has been written so far, not N, until the message is complete. Touching them is what costs:
a fresh 100 MB value takes 25 600 page faults of 4 KiB, which makes filling it several times slower
than copying the same bytes into memory already mapped. On Linux a builder from
:data:`HUGE_PAGES_FROM` up asks for transparent huge pages (``MADV_HUGEPAGE``, honoured when THP is
``always`` or ``madvise``): 2 MiB pages, 50 faults for 100 MB (timings in docs/consumer.md §6).
Where that is not available the advice is simply not given.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

_MIN_SIZE = 2  # CPython shares the empty and one-byte ``bytes`` objects: never write into those
HUGE_PAGES_FROM = 16 << 20
"""Builders from this size up advise the kernel to back them with huge pages."""
_MADV_HUGEPAGE = 14
_PAGE = 4096


def _huge_pages_advice() -> Any:
    """A function advising huge pages for ``(address, size)``, or None off Linux or without libc."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        madvise = libc.madvise
    except (ImportError, OSError, AttributeError):  # pragma: no cover - no usable libc
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int

    def advise(address: int, size: int) -> None:
        start = (address + _PAGE - 1) & ~(_PAGE - 1)  # madvise wants page-aligned ranges
        end = (address + size) & ~(_PAGE - 1)
        if end > start:
            madvise(start, end - start, _MADV_HUGEPAGE)  # advice only: a refusal changes nothing

    return advise


def _c_api() -> tuple[Any, Any, Any] | None:
    """``PyBytes_FromStringAndSize``, a way to see a ``bytes``' memory as writable and its address, or None."""
    if sys.implementation.name != "cpython":
        return None
    try:
        import ctypes
    except ImportError:  # pragma: no cover - CPython built without ctypes
        return None
    api = ctypes.pythonapi
    new = api.PyBytes_FromStringAndSize
    new.restype = ctypes.py_object
    new.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
    address = api.PyBytes_AsString
    address.restype = ctypes.c_void_p
    address.argtypes = (ctypes.py_object,)

    def writable(value: bytes) -> memoryview:
        return memoryview((ctypes.c_char * len(value)).from_address(address(value))).cast("B")

    return new, writable, address


_API = _c_api()
_ADVISE_HUGE_PAGES = _huge_pages_advice()


class BytesBuilder:
    """Writes ``size`` bytes in order with :meth:`append`, then :meth:`build` returns them as ``bytes``.

    Appending past ``size`` raises ``ValueError``, and so does building before ``size`` bytes were
    written: a half-filled value is never handed out.
    """

    __slots__ = ("_filled", "_target", "_value", "size")

    def __init__(self, size: int, *, use_c_api: bool = True) -> None:
        if size < 0:
            raise ValueError(f"size must be >= 0, not {size}")
        self.size = size
        self._filled = 0
        self._value: bytes | None = None
        if use_c_api and _API is not None and size >= _MIN_SIZE:
            new, writable, address = _API
            self._value = new(None, size)
            if size >= HUGE_PAGES_FROM and _ADVISE_HUGE_PAGES is not None:
                _ADVISE_HUGE_PAGES(address(self._value), size)
            self._target = writable(self._value)
        else:
            self._target = memoryview(bytearray(size))

    @property
    def filled(self) -> int:
        """Bytes written so far."""
        return self._filled

    def append(self, chunk: bytes | bytearray | memoryview) -> None:
        """Copy ``chunk`` after what was written before; the caller may drop ``chunk`` afterwards."""
        view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        if self._filled < 0:
            raise ValueError("append() after build()")
        end = self._filled + view.nbytes
        if end > self.size:
            raise ValueError(f"{end} bytes written into a value of {self.size}")
        self._target[self._filled : end] = view
        self._filled = end

    def fill(self, size: int, read_into: Callable[[memoryview], None]) -> None:
        """Let ``read_into`` write the next ``size`` bytes in place (``socket.recv_into``): no copy in between.

        ``read_into`` must fill the whole view it gets or raise; the bytes count as written only then.
        """
        if self._filled < 0:
            raise ValueError("fill() after build()")
        end = self._filled + size
        if size < 0 or end > self.size:
            raise ValueError(f"{end} bytes written into a value of {self.size}")
        view = self._target[self._filled : end]
        try:
            read_into(view)
        finally:
            view.release()
        self._filled = end

    def partial(self) -> bytes:
        """A copy of what was written so far, for reporting a value that came out the wrong size."""
        return bytes(self._target[: max(self._filled, 0)])

    def build(self) -> bytes:
        """The value, once every byte is written; the builder is spent afterwards."""
        if self._filled < 0:
            raise ValueError("build() was already called")
        if self._filled != self.size:
            raise ValueError(f"only {self._filled} of {self.size} bytes were written")
        target = self._target
        value = self._value if self._value is not None else bytes(target)
        target.release()
        self._value = None
        self._target = memoryview(b"")
        self._filled = -1
        return value
