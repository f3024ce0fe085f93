"""The pure parts of a payload read as a stream: whether a payload streams, how its ranges are laid out
(:mod:`.plan`) and how a compressed one is decoded as its ranges arrive (:mod:`.decoding`). No I/O: the
stream itself (:mod:`gateway.streams`) fetches the ranges and feeds them in."""
