"""How far ``gateway gc``'s long work got, told to an observer the caller passes in.

A scan of a production topic can take up to ``--scan-timeout`` (ten minutes by default); an
operator watching a silent command cannot tell a slow read from a hang. The library reports
counts and leaves the showing (a live line, a log line every few seconds, nothing) to the caller,
so that library code never writes to a terminal it does not own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Progress:
    """One step of a phase: ``done`` of ``total`` units (records read, or pending writes acted on)."""

    phase: str
    """``scan`` (the ``read_uncommitted`` read), ``committed read``, or ``sweep``."""
    subject: str
    """The topic read, or ``pending writes`` for the sweep."""
    done: int
    total: int
    unit: str = "records"


ProgressObserver = Callable[[Progress], None]
"""Called often (after every fetched batch); an observer that prints must throttle itself."""


def ignore(progress: Progress) -> None:
    """The default observer: nobody is watching."""
