"""A parsed object-store locator (pure): ``<scheme>://<bucket>/<prefix><topic>/<message id>`` on S3, GCS and Azure."""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ObjectLocator:
    """A validated locator: the object of one payload in the store's own bucket (or container).

    One scheme for the three clouds, so that a journal, ``gc`` and the locators older versions wrote
    read the same everywhere (``stores.S3Locator`` is this class under the name it always had)."""

    bucket: str
    key: str
    topic: str
    message_id: uuid.UUID
