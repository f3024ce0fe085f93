"""A parsed S3 locator (pure): what the store's mixins and the store itself agree a payload's object is."""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class S3Locator:
    """A validated locator: the object of one payload in the store's own bucket."""

    bucket: str
    key: str
    topic: str
    message_id: uuid.UUID
