"""The configuration keys, defaults and bounds the docs show are the settings schema's.

Every key, its default and its bound live in :mod:`gateway.settings`, which the producer, the consumer,
the Spark source and the command read; each docs table row that names such a key is checked against
it, so the docs cannot drift from the code again.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gateway.settings import CONSUMER, PRODUCER, SPARK, IntSetting, OptionalIntSetting

DOCS = Path(__file__).resolve().parents[2] / "docs"
_ROW = re.compile(r"^\|\s*`(?P<key>[a-z0-9_.]+)`\s*\|\s*(?P<default>[^|]*)\|")


def _defaults(producer: bool = True, consumer: bool = True) -> dict[str, Any]:
    """Every key the producer and the consumer read, with its default, from the settings schema."""
    tables = [*(PRODUCER if producer else ()), *(CONSUMER if consumer else ())]
    return {setting.key: setting.default for setting in tables}


def _minimum(key: str) -> int | None:
    minima = {s.key: s.minimum for s in (*PRODUCER, *CONSUMER) if isinstance(s, (IntSetting, OptionalIntSetting))}
    return minima.get(key)


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


_BOUND = re.compile(r"\(\s*(?:≥|>=)\s*([\d\s_\u202f\u00a0]+)\)")


@pytest.mark.parametrize(("page", "key", "cell"), [r for r in _documented() if r[1] in _defaults()])
def test_documented_bounds_match_the_schema(page: str, key: str, cell: str) -> None:
    """A row that shows a bound, ``32 000 000 (≥ 1)``, shows the one the parsers enforce."""
    shown = _BOUND.search(cell)
    if shown is not None:
        bound = int(re.sub(r"[\s_\u202f\u00a0]", "", shown.group(1)))
        assert bound == _minimum(key), f"{page}: `{key}` shows ≥ {bound}, the schema's bound is {_minimum(key)}"


@pytest.mark.parametrize(("page", "key", "cell"), [r for r in _documented() if r[1] in _defaults()])
def test_documented_defaults_match_the_code(page: str, key: str, cell: str) -> None:
    default = _defaults()[key]
    shown = _normal(cell)
    if key == "message.assembler.max.message.bytes" and "capacity" in shown:
        return  # documented as derived: the buffer capacity, which its own row checks
    if shown in ("", "-", "—", "none"):
        assert default in (None, "none"), f"{page}: `{key}` shows no default, the code's is {default!r}"
        return
    if isinstance(default, bool):
        assert shown == str(default).lower(), f"{page}: `{key}` shows {cell.strip()!r}, the code's is {default}"
    elif isinstance(default, int):
        assert shown.isdigit() and int(shown) == default, (
            f"{page}: `{key}` shows {cell.strip()!r}, the code's is {default}"
        )
    else:
        assert shown == str(default).lower(), f"{page}: `{key}` shows {cell.strip()!r}, the code's is {default!r}"


# ---------------------------------------------------------------------------------------------
# Spark source options (gateway/spark/options.py) against docs/spark.md

_ANY_ROW = re.compile(r"^\|(?P<keys>[^|]*)\|(?P<defaults>[^|]*)\|")
_PROSE_DEFAULTS = {"", "-", "\u2013", "\u2014", "none", "required", "aws", "boto3'schain", "buffercapacity"}


def _spark_defaults() -> dict[str, Any]:
    """Every option the source declares in the settings schema, lower-cased as Spark passes them, with its default."""
    return {
        (setting.spark or setting.key).lower(): setting.fallback
        if isinstance(setting, OptionalIntSetting) and setting.fallback is not None
        else setting.default
        for setting in SPARK
    }


def _spark_rows() -> list[tuple[str, str]]:
    """(option, default cell) of the option table in docs/spark.md; a row naming several options
    (``redis.url``, ``redis.prefix``) gives each its own comma-separated default."""
    rows: list[tuple[str, str]] = []
    in_table = False
    for line in (DOCS / "spark.md").read_text().splitlines():
        if line.startswith("| option | default"):
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
        match = _ANY_ROW.match(line) if in_table else None
        if not match or line.startswith("|---"):
            continue
        keys = re.findall(r"`([A-Za-z0-9_.*]+)`", match["keys"])
        cells = match["defaults"].split(",") if len(keys) > 1 else [match["defaults"]]
        if len(cells) != len(keys):
            cells = [match["defaults"]] * len(keys)
        rows += [(key.lower(), cell) for key, cell in zip(keys, cells, strict=True)]
    return rows


def test_every_spark_option_the_source_reads_is_documented() -> None:
    documented = {key for key, _ in _spark_rows()}
    assert documented, "docs/spark.md lost its option table"
    missing = sorted(set(_spark_defaults()) - documented)
    assert missing == []


@pytest.mark.parametrize(("key", "cell"), [r for r in _spark_rows() if r[0] in _spark_defaults()])
def test_documented_spark_defaults_match_the_code(key: str, cell: str) -> None:
    default = _spark_defaults()[key]
    shown = _normal(cell)
    if default is None or "capacity" in shown or "gap" in shown:
        assert shown in _PROSE_DEFAULTS or not shown[:1].isdigit(), f"spark.md: `{key}` shows {cell!r}, code: none"
    elif isinstance(default, bool):
        assert shown == str(default).lower(), f"spark.md: `{key}` shows {cell.strip()!r}, the code's is {default}"
    elif isinstance(default, int):
        assert shown.isdigit() and int(shown) == default, f"spark.md: `{key}` shows {cell!r}, the code's is {default}"
    else:
        assert shown == str(default).lower(), f"spark.md: `{key}` shows {cell.strip()!r}, the code's is {default!r}"


# ---------------------------------------------------------------------------------------------
# Prometheus metric names (gateway/prometheus.py METRICS) against docs/policy.md


def test_metric_table_in_the_docs_is_the_exporters() -> None:
    from gateway.prometheus import METRICS

    text = (DOCS / "policy.md").read_text()
    rows = re.findall(r"^\| `(gateway_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \| ([^|]*) \|$", text, re.MULTILINE)
    documented = [
        (name, kind, tuple(x.strip() for x in labels.split(",") if x.strip())) for name, kind, labels, _ in rows
    ]
    assert documented == [(m.name, m.kind, m.labels) for m in METRICS]


def test_every_option_name_the_source_accepts_is_in_the_table() -> None:
    """The accepted names (everything else is refused) are the documented ones."""
    from gateway.spark.options import KNOWN_OPTIONS

    documented = {key for key, _ in _spark_rows()}
    assert sorted(KNOWN_OPTIONS - documented) == []
