"""ViewReader: what an SDK's upload reads from the caller's payload, and how often it is copied."""

from __future__ import annotations

import io

from stores.blob import ViewReader


def test_reading_a_whole_bytes_payload_returns_it_without_a_copy() -> None:
    """Issue 42.3: a single-request upload (Azure Put Blob, GCS multipart) reads the payload whole; that read
    hands over the caller's object itself, where it copied 10 MB before."""
    payload = bytes(range(256)) * 4096
    view = memoryview(payload).cast("B")
    assert ViewReader(view).read() is payload
    assert ViewReader(view).read(len(payload) + 10) is payload
    reader = ViewReader(view)
    assert reader.read() is payload and reader.read() == b"" and reader.tell() == len(payload)


def test_partial_reads_and_other_buffers_are_copies_of_exactly_the_bytes_asked_for() -> None:
    payload = bytes(range(256)) * 4096
    reader = ViewReader(memoryview(payload))
    assert reader.read(1000) == payload[:1000]
    assert reader.read() == payload[1000:], "the rest, never the whole object"
    reader.seek(0)
    assert reader.read(len(payload) - 1) == payload[:-1]
    part = memoryview(payload)[10:5000]  # a part of a larger payload (S3 multipart)
    got = ViewReader(part).read()
    assert got == payload[10:5000] and got is not payload
    buffer = bytearray(payload)
    got = ViewReader(memoryview(buffer)).read()
    assert got == payload and type(got) is bytes, "a mutable buffer is copied: the caller may change it"
    sink = bytearray(300)
    reader = ViewReader(memoryview(payload))
    reader.seek(-200, io.SEEK_END)
    assert reader.readinto(sink) == 200 and bytes(sink[:200]) == payload[-200:]
