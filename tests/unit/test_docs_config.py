"""The configuration keys and defaults the docs show are the ones the code reads.

The defaults live where the code reads them (``parse_producer_config``, ``parse_consumer_config``);
this test records every key those parsers look up, with its default, and checks each docs table row
that names such a key against it, so the docs cannot drift from the code again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from gateway import consumer_config, producer_config

DOCS = Path(__file__).resolve().parents[2] / "docs"
_ROW = re.compile(r"^\|\s*`(?P<key>[a-z0-9_.]+)`\s*\|\s*(?P<default>[^|]*)\|")


def _defaults() -> dict[str, Any]:
    """Every key the parsers read, with its default: the readers are wrapped to take notes."""
    asked: dict[str, Any] = {}

    def noting(read: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(conf: Any, key: str, default: Any, *args: Any, **kwargs: Any) -> Any:
            asked.setdefault(key, default)
            return read(conf, key, default, *args, **kwargs)

        return wrapper

    for module, parse in (
        (producer_config, producer_config.parse_producer_config),
        (consumer_config, consumer_config.parse_consumer_config),
    ):
        readers = [
            name for name in ("pop_int", "pop_bool", "peek_int", "pop_str", "pop_float") if hasattr(module, name)
        ]
        with ExitStack() as patches:
            for name in readers:
                patches.enter_context(patch.object(module, name, noting(getattr(module, name))))
            parse({})
    return asked


def _normal(text: str) -> str:
    """``32 000 000 (≥ 1)`` -> ``32000000``; ``true`` -> ``true``; the first value in a cell."""
    text = re.sub(r"\(.*?\)", "", text).strip().strip("`").strip()
    text = text.split(";")[0].split(",")[0].strip()
    return re.sub(r"[\s_\u202f\u00a0]", "", text).lower()


def _documented() -> list[tuple[str, str, str]]:
    """(page, key, default cell) of every row of a table whose second column is headed "default"."""
    rows = []
    for page in sorted(DOCS.glob("*.md")):
        lines = page.read_text().splitlines()
        defaults_table = False
        for i, line in enumerate(lines):
            if not line.startswith("|"):
                defaults_table = False
                continue
            if i + 1 < len(lines) and re.match(r"^\|\s*:?-{3,}", lines[i + 1]):
                cells = [c.strip().lower() for c in line.strip("|").split("|")]
                defaults_table = len(cells) > 1 and "default" in cells[1]
                continue
            match = _ROW.match(line)
            if defaults_table and match:
                rows.append((page.name, match["key"], match["default"]))
    return rows


def test_every_key_the_clients_read_is_documented() -> None:
    text = "\n".join(page.read_text() for page in DOCS.glob("*.md"))
    missing = [key for key in _defaults() if key != "message.max.bytes" and f"`{key}`" not in text]
    assert missing == []


@pytest.mark.parametrize(("page", "key", "cell"), [r for r in _documented() if r[1] in _defaults()])
def test_documented_defaults_match_the_code(page: str, key: str, cell: str) -> None:
    default = _defaults()[key]
    shown = _normal(cell)
    if key == "message.assembler.max.message.bytes" and "capacity" in shown:
        return  # documented as derived: the buffer capacity, which its own row checks
    if shown in ("", "-", "—", "none"):
        assert default is None, f"{page}: `{key}` shows no default, the code's is {default!r}"
        return
    if isinstance(default, bool):
        assert shown == str(default).lower(), f"{page}: `{key}` shows {cell.strip()!r}, the code's is {default}"
    elif isinstance(default, int):
        assert shown.isdigit() and int(shown) == default, (
            f"{page}: `{key}` shows {cell.strip()!r}, the code's is {default}"
        )
    else:
        assert shown == str(default).lower(), f"{page}: `{key}` shows {cell.strip()!r}, the code's is {default!r}"
