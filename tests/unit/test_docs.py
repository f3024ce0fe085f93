"""The docs cannot drift from the code: links and cited paths exist, every page is listed, every key is documented.

Each check reads the files as a user would meet them; a broken link, a renamed test cited in prose, a
configuration key added without a docs row or a docs row for a key the code no longer takes fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gateway.cli import build_parser
from gateway.config import pop_int
from gateway.settings import CONSUMER, PRODUCER
from gateway.spark.options import KNOWN_OPTIONS, OWN_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]

LINK = re.compile(r"\]\(([^)\s]+)\)")
CITED_PATH = re.compile(r"`((?:gateway|stores|tests|benchmarks|docs|\.ci)/[\w./-]*\w)(?:::[\w\[\]-]+)?`")
TABLE_KEY = re.compile(r"^\| `([a-z_][\w.]*[a-z_])` \|", re.M)
POPPERS = {"pop_int", "pop_bool", "pop_choice", "pop_float", "pop_str"}


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n") if heading + "\n" in text else text.index(heading)
    rest = text[start + len(heading) :]
    following = re.search(rf"^#{{1,{len(level)}}} ", rest, re.M)
    return rest[: following.start()] if following else rest


def _relative_links(page: Path) -> list[str]:
    return [
        link.split("#", 1)[0]
        for link in LINK.findall(page.read_text())
        if not re.match(r"[a-z]+:", link) and not link.startswith("#") and link.split("#", 1)[0]
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    missing = [link for link in _relative_links(page) if not (page.parent / link).exists()]
    assert not missing, f"{page.name} links to files that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_cited_path_exists(page: Path) -> None:
    missing = sorted({p for p in CITED_PATH.findall(page.read_text()) if not (ROOT / p).exists()})
    assert not missing, f"{page.name} cites paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_names_a_file_outside_the_repository(page: Path) -> None:
    outside = re.findall(r"`(?:\.\./[\w./-]+|/(?:work|root|home)/[\w./-]+)", page.read_text())
    assert not outside, f"{page.name} names files outside the repository: {outside}"


def test_readme_lists_every_docs_page() -> None:
    listed = _section((ROOT / "README.md").read_text(), "## Documentation")
    unlisted = [page.name for page in DOCS if f"docs/{page.name}" not in listed]
    assert not unlisted, f"README's Documentation list lacks {unlisted}"


def test_readme_states_the_confluent_kafka_range_of_pyproject() -> None:
    pin = re.search(r'"confluent-kafka(>=[\d.]+,<[\d.]+)"', (ROOT / "pyproject.toml").read_text())
    assert pin, "pyproject.toml pins confluent-kafka with a floor and a ceiling"
    assert f"`{pin.group(1)}`" in (ROOT / "README.md").read_text(), f"README does not state {pin.group(1)}"


def _popped_keys(module: Path) -> set[str]:
    """The configuration keys a module takes off a user's config: ``pop_*(conf, "key", ...)``, ``conf.pop("key")``,
    the key given literally or as a module-level constant."""
    tree = ast.parse(module.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    keys = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, args = node.func, node.args
        if isinstance(func, ast.Name) and func.id in POPPERS and len(args) >= 2:
            key = args[1]
        elif isinstance(func, ast.Attribute) and func.attr == "pop" and isinstance(func.value, ast.Name) and args:
            if func.value.id != "conf":  # the user's config, as every reader of keys names it
                continue
            key = args[0]
        else:
            continue
        value = constants.get(key.id) if isinstance(key, ast.Name) else getattr(key, "value", None)
        if isinstance(value, str):
            keys.add(value)
    return keys


CLIENT_CODE = [
    path
    for path in sorted((ROOT / "gateway").rglob("*.py"))
    if not {"spark", "testing", "settings"} & set(path.relative_to(ROOT / "gateway").parts)
]
"""Where the producer and consumer read their keys (the Spark source has its own option list, below)."""
TABLES = {"## 8. Configuration keys HybridConsumer owns": CONSUMER, "## 9. Producer side": PRODUCER}
LEFT_TO_LIBRDKAFKA = {"message.max.bytes"}
"""Read by the producer, but librdkafka's key, documented by librdkafka."""


def test_every_key_read_by_name_is_declared_in_the_settings_schema() -> None:
    """A key popped by name (``pop_int(conf, "key", ...)``, ``conf.pop("key")``) bypasses the schema: declare it."""
    declared = {setting.key for setting in (*PRODUCER, *CONSUMER)}
    by_name = set().union(*(_popped_keys(path) for path in CLIENT_CODE))
    assert sorted(by_name - declared) == []


def test_a_key_popped_by_name_is_found() -> None:
    assert _popped_keys(Path(__file__)) >= {"consume.max.bytes", "some.key"}, "the scan no longer finds keys"


def _example(conf: dict[str, int]) -> None:  # what the scan above must find
    pop_int(conf, "consume.max.bytes", 1)
    conf.pop("some.key")


@pytest.mark.parametrize("heading", TABLES)
def test_every_client_key_is_documented_and_every_documented_key_accepted(heading: str) -> None:
    consumer_md = (ROOT / "docs" / "consumer.md").read_text()
    documented = set(TABLE_KEY.findall(_section(consumer_md, heading)))
    declared = {setting.key for setting in TABLES[heading]} - LEFT_TO_LIBRDKAFKA
    assert sorted(declared - documented) == [], f"docs/consumer.md {heading!r} lacks rows for these keys"
    assert sorted(documented - declared) == [], f"docs/consumer.md {heading!r} documents keys never read"


def test_every_spark_option_is_documented_and_every_documented_option_accepted() -> None:
    spark = (ROOT / "docs" / "spark.md").read_text()
    documented = set(TABLE_KEY.findall(_section(spark, "## Options")))
    undocumented = sorted(option for option in OWN_OPTIONS if f"`{option}`" not in spark)
    assert not undocumented, f"docs/spark.md does not document {undocumented}"
    unknown = sorted(o for o in documented if o.lower() not in KNOWN_OPTIONS and not o.startswith("kafka."))
    assert not unknown, f"docs/spark.md documents options the source refuses: {unknown}"


def _subcommand_flags() -> dict[str, set[str]]:
    parser = build_parser()
    (choices,) = [a.choices for a in parser._actions if isinstance(a.choices, dict)]  # the subparsers action
    return {
        name: {flag for action in sub._actions for flag in action.option_strings if flag.startswith("--")} - {"--help"}
        for name, sub in choices.items()
        if name in ("gc", "reconcile")
    }


@pytest.mark.parametrize("command", ["gc", "reconcile"])
def test_every_cli_flag_is_documented(command: str) -> None:
    docs = "\n".join(page.read_text() for page in PAGES)
    undocumented = sorted(flag for flag in _subcommand_flags()[command] if flag not in docs)
    assert not undocumented, f"gateway {command} flags no page documents: {undocumented}"
