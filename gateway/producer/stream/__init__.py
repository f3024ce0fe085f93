"""The producer's stream route: a value read from a file or an iterable as it goes up, never held whole."""
