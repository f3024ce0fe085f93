"""Azure's block upload, a block per part: what :meth:`AzureBlobStore.put_stream` sends a stream with.

Each part is staged as one block (``Put Block``, its MD5 checked by the service where
``validate_content`` is on) and the blob appears when the block list is committed. Blocks never
committed belong to no blob; Azure discards them after a week, and there is no request to abort
them beyond forgetting them.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from gateway.errors import StoreError
from stores.azure._backend import AzureBackend, _mapped

MAX_BLOCKS = 50_000
"""A block blob holds at most this many blocks."""


class AzurePartUpload:
    """The blocks of one blob, committed once."""

    def __init__(self, backend: AzureBackend, key: str, metadata: Mapping[str, str]) -> None:
        self._blob: Any = backend.container.get_blob_client(key)
        self._metadata = {k.replace("-", "_"): v for k, v in metadata.items()}  # C# identifiers only
        self._validate = backend.validate_content
        self._blocks: list[str] = []

    def add(self, part: memoryview) -> None:
        if len(self._blocks) >= MAX_BLOCKS:
            raise StoreError(f"an Azure blob takes at most {MAX_BLOCKS} blocks: raise reference.stream.part.bytes")
        block = base64.b64encode(f"{len(self._blocks):08d}".encode()).decode()
        data = bytes(part)  # the SDK needs bytes to compute the block's MD5
        _mapped(lambda: self._blob.stage_block(block, data, length=len(data), validate_content=self._validate))
        self._blocks.append(block)

    def complete(self) -> None:
        from azure.storage.blob import BlobBlock

        blocks = [BlobBlock(block_id=b) for b in self._blocks]
        _mapped(lambda: self._blob.commit_block_list(blocks, metadata=self._metadata))

    def abort(self) -> None:
        """Nothing to send: uncommitted blocks belong to no blob, and Azure discards them."""
        return None


class AzurePartUploads:
    """The block uploads of one container (:class:`~stores.blob.PartUploads`)."""

    def __init__(self, backend: AzureBackend) -> None:
        self._backend = backend

    def open_upload(self, key: str, metadata: Mapping[str, str]) -> AzurePartUpload:
        return AzurePartUpload(self._backend, key, metadata)
