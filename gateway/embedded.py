"""The documented ``from gateway.embedded import EmbeddedKafka``; it lives in :mod:`gateway.testing.embedded`."""

from gateway.testing.embedded import EmbeddedKafka

__all__ = ["EmbeddedKafka"]
