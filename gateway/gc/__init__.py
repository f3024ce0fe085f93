"""Sweeping orphaned payloads (``gateway gc``): pending writes judged against their topic."""

from gateway.gc.sweeper import SweepReport, kafka_verifier, sweep

__all__ = ["SweepReport", "kafka_verifier", "sweep"]
