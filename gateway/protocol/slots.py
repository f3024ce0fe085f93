"""Faster construction for the frozen dataclasses a consumer builds for every segment it reads.

A frozen dataclass's generated ``__init__`` stores each field through ``object.__setattr__``, a
generic call that a frozen class cannot avoid; the slot's own descriptor stores it directly, in a
fraction of the time. The protocol's typed values (a decoded ``_lm`` header, a segment, a
classification, an assembled message) are built several times per record, so that difference
shows in what a segment record costs (measured in docs/consumer.md §1, "What a segment record
costs").
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

_T = TypeVar("_T")


def direct_init(cls: type[_T]) -> type[_T]:
    """Replace the ``__init__`` of a frozen slots dataclass with one that stores through the slots.

    Same parameters and defaults; instances stay frozen, equal and hashable exactly as before.
    Refuses what it cannot reproduce: default factories, ``init=False`` or keyword-only fields,
    and ``__post_init__``.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen slots dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has __post_init__")
    namespace: dict[str, Any] = {}
    arguments: list[str] = []
    stores: list[str] = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.default_factory is not dataclasses.MISSING or not f.init or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: only plain positional fields are supported")
        namespace[f"_store_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is dataclasses.MISSING:
            arguments.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = f.default
            arguments.append(f"{f.name}=_default_{f.name}")
        stores.append(f"    _store_{f.name}(self, {f.name})")
    source = f"def __init__(self, {', '.join(arguments)}):\n" + "\n".join(stores or ["    pass"]) + "\n"
    exec(source, namespace)  # the way dataclasses itself builds __init__
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    setattr(cls, "__init__", init)  # noqa: B010 - assigning a method, which mypy refuses in attribute form
    return cls
