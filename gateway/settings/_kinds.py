"""What a setting is, and the one parser of each type of value.

A setting is declared once (key, type, default, bounds, a line of doc, the names Spark and the Java
clients give it) and every entry point reads it through its declaration: the producer's and the
consumer's config dicts, the Spark source's option map and the ``gateway`` command. So a default or
a bound has one place, and a value refused in one entry point is refused in all with the same words.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def parse_bool(key: str, value: Any, error: type[Exception] = ValueError) -> bool:
    """A config boolean as Kafka clients accept it: a bool, or true/false (1/0, yes/no, on/off) as text."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise error(f"{key} must be true or false, got {value!r}")


def parse_int(key: str, value: Any, error: type[Exception] = ValueError) -> int:
    """A config integer: an ``int``, a whole ``float`` or integer text; never a fraction silently cut.

    ``int(800000.5)`` would quietly become 800000 and ``int(True)`` 1, so both are refused by name.
    """
    if isinstance(value, bool):
        raise error(f"{key} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        raise error(f"{key} must be a whole number, got {value!r}")
    try:
        return int(str(value).strip())
    except ValueError:
        raise error(f"{key} must be an integer, got {value!r}") from None


def check_minimum(key: str, number: int, minimum: int | None, error: type[Exception] = ValueError) -> int:
    if minimum is not None and number < minimum:
        raise error(f"{key} must be >= {minimum}, got {number}")
    return number


def parse_choice(key: str, value: Any, choices: tuple[str, ...], error: type[Exception] = ValueError) -> str:
    """One of ``choices`` (case-insensitive), naming them all when the value is none of them."""
    text = str(value).strip().lower()
    if text not in choices:
        raise error(f"{key} must be one of {', '.join(choices)}, got {text!r}")
    return text


@dataclass(frozen=True, slots=True)
class Setting(abc.ABC, Generic[T]):
    """One key: how it is spelt, what it holds when unset, and what the other clients call it."""

    key: str
    default: T
    doc: str
    """One line for the docs' tables and ``repr``: what the key does, not how it is parsed."""
    spark: str | None = None
    """The option name of the ``hybrid-kafka`` Spark source (as docs/spark.md spells it), or None: not an option."""
    java: tuple[str, ...] = ()
    """Names LinkedIn's or Apache's Java clients give the same setting; those other than ``key`` are accepted
    for it (``rename_aliases``)."""

    @abc.abstractmethod
    def parse(self, value: Any, error: type[Exception] = ValueError) -> T:
        """``value`` as this setting's type, or ``error`` naming the key."""

    def pop(self, conf: MutableMapping[str, Any], error: type[Exception] = ValueError) -> T:
        """The value in a client's config dict, taken out of it so that librdkafka never sees it."""
        return self.parse(conf.pop(self.key), error) if self.key in conf else self.default

    def peek(self, conf: Mapping[str, Any], error: type[Exception] = ValueError) -> T:
        """The value of a key that must stay in the config (librdkafka's own, which we need to know too)."""
        return self.parse(conf[self.key], error) if self.key in conf else self.default

    def option(self, options: Mapping[str, str], error: type[Exception] = ValueError) -> T:
        """The value in Spark's option map (names lower-cased, as Spark hands them over); empty text is unset.

        A refusal names the option as Spark handed it over (``includeheaders``), as it always has.
        """
        name = (self.spark or self.key).lower()
        value = options.get(name)
        if value is None or (str(value).strip() == "" and not self.keeps_empty()):
            return self.default
        return (self if name == self.key else replace(self, key=name)).parse(value, error)

    def keeps_empty(self) -> bool:
        """Whether empty text is a value of its own (an empty prefix) rather than "unset"."""
        return False

    @property
    def aliases(self) -> tuple[str, ...]:
        """The Java clients' names that differ from ``key``."""
        return tuple(name for name in self.java if name != self.key)


@dataclass(frozen=True, slots=True)
class IntSetting(Setting[int]):
    minimum: int | None = None

    def parse(self, value: Any, error: type[Exception] = ValueError) -> int:
        return check_minimum(self.key, parse_int(self.key, value, error), self.minimum, error)


@dataclass(frozen=True, slots=True)
class OptionalIntSetting(Setting[int | None]):
    """An integer whose default is another setting's value (``None`` here, filled in by its reader)."""

    minimum: int | None = None
    default_doc: str = ""
    """What the default is, in words (``the buffer capacity``)."""
    fallback: int | None = None
    """The number taken when what the default derives from is unset too (``spark.network.timeout``: 120 s)."""

    def parse(self, value: Any, error: type[Exception] = ValueError) -> int | None:
        return check_minimum(self.key, parse_int(self.key, value, error), self.minimum, error)


@dataclass(frozen=True, slots=True)
class BoolSetting(Setting[bool]):
    def parse(self, value: Any, error: type[Exception] = ValueError) -> bool:
        return parse_bool(self.key, value, error)


@dataclass(frozen=True, slots=True)
class ChoiceSetting(Setting[str]):
    choices: tuple[str, ...] = ()

    def parse(self, value: Any, error: type[Exception] = ValueError) -> str:
        return parse_choice(self.key, value, self.choices, error)


@dataclass(frozen=True, slots=True)
class ValueSetting(Setting[Any]):
    """A value handed as it is to the parser of its own domain (topic renames, peer formats, a callback)."""

    choices: tuple[str, ...] = ()
    """The words it takes, when it takes words (for the docs); its own parser checks them."""

    def parse(self, value: Any, error: type[Exception] = ValueError) -> Any:
        return value


@dataclass(frozen=True, slots=True)
class TextSetting(Setting[str | None]):
    """Text (a URL, a bucket, a prefix); unset is ``default``."""

    secret: bool = False
    """A credential: read by the ``gateway`` command from ``--command-config`` or the environment too."""
    empty: bool = False
    """Empty text is a value (``s3.prefix=`` is no prefix), not "unset"."""

    def keeps_empty(self) -> bool:
        return self.empty

    def parse(self, value: Any, error: type[Exception] = ValueError) -> str | None:
        return None if value is None else str(value)


def rename_aliases(conf: MutableMapping[str, Any], settings: tuple[Setting[Any], ...]) -> None:
    """Rename the Java clients' spellings to ours; both spellings with different values is an error."""
    for setting in settings:
        for theirs in setting.aliases:
            if theirs not in conf:
                continue
            value = conf.pop(theirs)
            ours = setting.key
            if ours in conf and str(conf[ours]).lower() != str(value).lower():
                raise ValueError(f"{theirs}={value!r} and {ours}={conf[ours]!r} say different things; set one")
            conf[ours] = value
