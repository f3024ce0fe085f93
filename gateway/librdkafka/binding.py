"""librdkafka's own C API, for the one thing confluent-kafka's binding cannot carry: exact commit metadata.

confluent-kafka's ``TopicPartition.metadata`` is a C string. Reading committed offsets, its C
extension copies the metadata librdkafka hands it with ``strdup``, and librdkafka's copy of
metadata has no terminator: metadata a Java client committed (``"4,"``, two bytes) comes back with
whatever follows it in memory (``b'4,\\xf5\\x95\\x8aU'``), and reading ``.metadata`` then raises
``UnicodeDecodeError``. Writing, it sends ``strlen + 1`` bytes, so every commit ends in a NUL that
a Java reader sees as ``"\\u0000"``. librdkafka's ``rd_kafka_topic_partition_t`` carries metadata
with its size both ways; this module calls it through ``ctypes``:

* only the copy of librdkafka confluent-kafka already loaded (``RTLD_NOLOAD``): a client handle
  belongs to the library instance that made it;
* on the client's own ``rd_kafka_t``. A consumer must commit through its own handle: a commit
  from any other handle has generation -1 and no member id, which Apache Kafka 4.1.2 refuses with
  ``UNKNOWN_MEMBER_ID`` while the group has members (measured, classic and consumer protocols).
  The handle is the first field after the object header of confluent-kafka's ``Handle`` struct;
  it is used only when librdkafka confirms it: ``rd_kafka_opaque()`` of that handle is the
  Python client itself (confluent-kafka sets it so that its callbacks find their client) and
  ``rd_kafka_type()`` is the client's kind. When either check fails, :func:`client_handle`
  returns ``None`` and callers fall back to confluent-kafka's calls.

The handle is read again on every call: confluent-kafka sets the field to NULL when the client
closes, which raises here as it does there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

log = logging.getLogger(__name__)

LIB_ENV: Final[str] = "GATEWAY_LIBRDKAFKA"
"""A librdkafka to use instead of the one found (the embedded cluster honours it)."""

RD_KAFKA_PRODUCER: Final[int] = 0
RD_KAFKA_CONSUMER: Final[int] = 1
EVENT_OFFSET_COMMIT: Final[int] = 0x20
CLOSED: Final[dict[int, str]] = {RD_KAFKA_PRODUCER: "Producer has been closed", RD_KAFKA_CONSUMER: "Consumer closed"}
"""confluent-kafka's words for a call on a closed client."""

_VP = ctypes.c_void_p


class CPartition(ctypes.Structure):
    """``rd_kafka_topic_partition_t`` (rdkafka.h; unchanged since librdkafka 0.9)."""

    _fields_ = [
        ("topic", ctypes.c_char_p),
        ("partition", ctypes.c_int32),
        ("offset", ctypes.c_int64),
        ("metadata", _VP),
        ("metadata_size", ctypes.c_size_t),
        ("opaque", _VP),
        ("err", ctypes.c_int),
        ("_private", _VP),
    ]


class CPartitionList(ctypes.Structure):
    """``rd_kafka_topic_partition_list_t``."""

    _fields_ = [("cnt", ctypes.c_int), ("size", ctypes.c_int), ("elems", ctypes.POINTER(CPartition))]


_LIST = ctypes.POINTER(CPartitionList)
COMMIT_CB = ctypes.CFUNCTYPE(None, _VP, ctypes.c_int, _LIST, _VP)
"""``rd_kafka_commit_queue``'s callback type."""

_FUNCTIONS: Final[dict[str, tuple[Any, list[Any]]]] = {
    # name: (restype, argtypes), from rdkafka.h
    "rd_kafka_version": (ctypes.c_int, []),
    "rd_kafka_type": (ctypes.c_int, [_VP]),
    "rd_kafka_opaque": (_VP, [_VP]),
    "rd_kafka_err2str": (ctypes.c_char_p, [ctypes.c_int]),
    "rd_kafka_fatal_error": (ctypes.c_int, [_VP, ctypes.c_char_p, ctypes.c_size_t]),
    "rd_kafka_topic_partition_list_new": (_LIST, [ctypes.c_int]),
    "rd_kafka_topic_partition_list_add": (ctypes.POINTER(CPartition), [_LIST, ctypes.c_char_p, ctypes.c_int32]),
    "rd_kafka_topic_partition_list_destroy": (None, [_LIST]),
    "rd_kafka_committed": (ctypes.c_int, [_VP, _LIST, ctypes.c_int]),
    "rd_kafka_commit_queue": (ctypes.c_int, [_VP, _LIST, _VP, COMMIT_CB, _VP]),
    "rd_kafka_queue_new": (_VP, [_VP]),
    "rd_kafka_queue_destroy": (None, [_VP]),
    "rd_kafka_queue_poll": (_VP, [_VP, ctypes.c_int]),
    "rd_kafka_event_type": (ctypes.c_int, [_VP]),
    "rd_kafka_event_error": (ctypes.c_int, [_VP]),
    "rd_kafka_event_topic_partition_list": (_LIST, [_VP]),
    "rd_kafka_event_destroy": (None, [_VP]),
    "rd_kafka_send_offsets_to_transaction": (_VP, [_VP, _LIST, _VP, ctypes.c_int]),
    "rd_kafka_consumer_group_metadata_read": (_VP, [ctypes.POINTER(_VP), ctypes.c_char_p, ctypes.c_size_t]),
    "rd_kafka_consumer_group_metadata_destroy": (None, [_VP]),
    "rd_kafka_error_code": (ctypes.c_int, [_VP]),
    "rd_kafka_error_string": (ctypes.c_char_p, [_VP]),
    "rd_kafka_error_is_fatal": (ctypes.c_int, [_VP]),
    "rd_kafka_error_is_retriable": (ctypes.c_int, [_VP]),
    "rd_kafka_error_txn_requires_abort": (ctypes.c_int, [_VP]),
    "rd_kafka_error_destroy": (None, [_VP]),
}


def candidate_library_paths() -> list[str]:
    """Where the librdkafka that confluent-kafka uses can be, best guess first.

    The copy already mapped into this process is preferred because it is, by construction, the one
    the wheel was built and tested with; the globs cover wheels on platforms without /proc.
    """
    # Importing the extension maps the bundled librdkafka into the process (seen in /proc/self/maps).
    import confluent_kafka
    import confluent_kafka.cimpl

    paths: list[str] = []
    override = os.environ.get(LIB_ENV)
    if override:
        paths.append(override)
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and os.path.basename(fields[-1]).startswith("librdkafka"):
                    paths.append(fields[-1])
    except OSError:
        pass
    pkg_dir = Path(confluent_kafka.__file__).resolve().parent
    for pattern in (
        str(pkg_dir.parent / "confluent_kafka.libs" / "librdkafka*"),  # manylinux / delvewheel
        str(pkg_dir / ".dylibs" / "librdkafka*"),  # macOS delocate
        str(pkg_dir / "librdkafka*"),
    ):
        paths.extend(sorted(glob.glob(pattern)))
    system = ctypes.util.find_library("rdkafka")
    if system:
        paths.append(system)
    paths.append(str(confluent_kafka.cimpl.__file__))  # a build that links librdkafka in statically
    return list(dict.fromkeys(paths))


class Librdkafka:
    """The functions above, bound in the librdkafka instance confluent-kafka runs on."""

    _instance: Librdkafka | None = None
    _problem: str | None = None
    _lock = threading.Lock()

    def __init__(self, cdll: ctypes.CDLL, path: str) -> None:
        self.path = path
        for name, (restype, argtypes) in _FUNCTIONS.items():
            fn = getattr(cdll, name)  # AttributeError: not this library
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name.removeprefix("rd_kafka_"), fn)

    def __getattr__(self, name: str) -> Any:  # the bound functions, for mypy
        raise AttributeError(name)

    @classmethod
    def get(cls) -> Librdkafka | None:
        """The binding, or ``None`` (the reason logged once) when no loaded librdkafka has the calls."""
        with cls._lock:
            if cls._instance is None and cls._problem is None:
                cls._instance, cls._problem = cls._load()
                if cls._problem is not None:
                    log.warning("librdkafka's C API is not reachable: %s", cls._problem)
            return cls._instance

    @classmethod
    def _load(cls) -> tuple[Librdkafka | None, str | None]:
        import confluent_kafka

        wanted = confluent_kafka.libversion()[1]
        problems: list[str] = []
        for path in candidate_library_paths():
            try:  # RTLD_NOLOAD: the very instance confluent-kafka loaded, or nothing
                lib = cls(ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW), path)
            except (OSError, AttributeError) as exc:
                problems.append(f"{path}: {exc}")
                continue
            if lib.version() == wanted:
                return lib, None
            problems.append(f"{path}: version {lib.version():#x}, confluent-kafka runs {wanted:#x}")
        return None, "; ".join(problems) or "no librdkafka found"

    def err2text(self, code: int) -> str:
        raw = self.err2str(code)
        return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(code)


def handle_field(client: Any) -> int:
    """The ``rd_kafka_t *`` in confluent-kafka's ``Handle`` struct, right after the object header (0 once closed)."""
    return ctypes.c_void_p.from_address(id(client) + object.__basicsize__).value or 0


def client_handle(lib: Librdkafka, client: Any, kind: int) -> int | None:
    """``client``'s ``rd_kafka_t`` if librdkafka confirms it is that client's, else ``None``.

    Only instances of confluent-kafka's own C types are looked into, and only a handle whose
    opaque pointer is the client object itself is accepted.
    """
    import confluent_kafka.cimpl

    base = confluent_kafka.cimpl.Consumer if kind == RD_KAFKA_CONSUMER else confluent_kafka.cimpl.Producer
    if not isinstance(client, base) or base.__basicsize__ < object.__basicsize__ + ctypes.sizeof(_VP):
        return None
    rk = handle_field(client)
    if not rk or lib.opaque(rk) != id(client) or lib.type(rk) != kind:
        return None
    return rk


@dataclass(frozen=True, slots=True)
class CEntry:
    """One element of a partition list, with its metadata exactly as librdkafka holds it."""

    topic: str
    partition: int
    offset: int
    metadata: bytes | None
    err: int


def new_list(lib: Librdkafka, entries: Sequence[tuple[str, int, int, bytes | None]]) -> tuple[Any, list[Any]]:
    """A partition list for ``(topic, partition, offset, metadata)``; the buffers must outlive its use.

    The metadata points into buffers owned here: call :func:`destroy_list`, which detaches them
    before librdkafka frees the list (librdkafka copies what it keeps).
    """
    plist = lib.topic_partition_list_new(max(1, len(entries)))
    buffers: list[Any] = []
    for topic, partition, offset, metadata in entries:
        elem = lib.topic_partition_list_add(plist, topic.encode("utf-8"), partition).contents
        elem.offset = offset
        if metadata:  # none or empty: librdkafka writes "" (a NULL STRING trips old Java clients)
            buffer = ctypes.create_string_buffer(metadata, len(metadata))
            buffers.append(buffer)
            elem.metadata, elem.metadata_size = ctypes.cast(buffer, _VP), len(metadata)
    return plist, buffers


def destroy_list(lib: Librdkafka, plist: Any, *, owned_metadata: bool) -> None:
    """Free a list; metadata this module put in (``owned_metadata``) is detached first."""
    if owned_metadata:
        for i in range(plist.contents.cnt):
            plist.contents.elems[i].metadata, plist.contents.elems[i].metadata_size = None, 0
    lib.topic_partition_list_destroy(plist)


def read_list(plist: Any) -> list[CEntry]:
    """The elements of a list librdkafka filled, metadata copied by its size (never by a terminator)."""
    out = []
    for i in range(plist.contents.cnt):
        elem = plist.contents.elems[i]
        metadata = ctypes.string_at(elem.metadata, elem.metadata_size) if elem.metadata else None
        topic = elem.topic.decode("utf-8", "replace") if elem.topic else ""
        out.append(CEntry(topic, elem.partition, elem.offset, metadata, elem.err))
    return out


def fatal_error(client: Any, kind: int) -> tuple[int, str] | None:
    """``client``'s fatal error as ``(code, reason)``, or ``None`` when it has none or cannot be asked.

    confluent-kafka 2.16's ``flush`` of a fenced transactional producer sometimes raises a bare
    ``SystemError`` ("returned NULL without setting an exception") instead of the fatal
    ``KafkaException``: librdkafka still knows the error, and this reads it back.
    """
    lib = Librdkafka.get()
    rk = None if lib is None else client_handle(lib, client, kind)
    if lib is None or rk is None:
        return None
    reason = ctypes.create_string_buffer(512)
    code = lib.fatal_error(rk, reason, len(reason))
    return (int(code), reason.value.decode("utf-8", "replace")) if code else None
