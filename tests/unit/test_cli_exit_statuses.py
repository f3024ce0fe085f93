"""The exit statuses and producer keys an operator reads in the help and the docs are the code's.

Scripts branch on exit codes and operators copy keys from the tables; a code or key the docs omit
is one a script or a deployment gets wrong. Each command's ``Exit status:`` sentence is built from
the table its code returns by (``gateway.command.exit_status_text``); these tests hold the help
texts and the docs to it, and the producer's key table to the keys the producer reads.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from gateway import cli
from gateway.command import EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE, exit_status_text
from gateway.gc.sweeper import EXIT_INCOMPLETE

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(actions) == 1
    return dict(actions[0].choices)


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def test_every_subcommand_lists_every_exit_status_it_returns() -> None:
    subparsers = _subparsers()
    assert set(subparsers) == {"gc", "reconcile", "demo", "bench"}
    for name, parser in subparsers.items():
        description = _plain(parser.description or "")
        codes = [int(c) for c in re.findall(r"(?:Exit status: |; )(\d) ", description)]
        assert codes[:4] == [0, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE], f"gateway {name}: {description}"
    assert f"{EXIT_INCOMPLETE} some kept" in _plain(subparsers["gc"].description or "")


@pytest.mark.parametrize(
    ("page", "statuses"), [("stores.md", cli.GC_EXIT_STATUSES), ("spark.md", cli.RECONCILE_EXIT_STATUSES)]
)
def test_the_docs_give_the_commands_own_exit_status_sentence(page: str, statuses: dict[int, str]) -> None:
    assert _plain(exit_status_text(statuses)) in _plain((DOCS / page).read_text())


def test_gc_returns_only_codes_its_help_lists() -> None:
    from gateway.gc.sweeper import SweepReport

    returned = {SweepReport(dry_run=True).exit_code(), EXIT_INCOMPLETE}
    assert returned <= set(cli.GC_EXIT_STATUSES)


def test_reconcile_returns_only_codes_its_help_lists() -> None:
    from gateway.spark.reconcile import EXIT_SHARED_PREFIX, Dangling, ReconcileReport, Undecided

    def report(**found: object) -> ReconcileReport:
        out = ReconcileReport(("t",), {})
        for name, value in found.items():
            setattr(out, name, value)
        return out

    returned = {
        report().exit_code(),
        report(dangling=[Dangling("s", "l", "t", 0, 1)]).exit_code(),
        report(undecided=[Undecided("s", "l", "kept: open")]).exit_code(),
        report(refused=True, withheld="shared", undecided=[Undecided("s", "l", "open")]).exit_code(),
    }
    assert returned == {0, EXIT_FAILED, EXIT_INCOMPLETE, EXIT_SHARED_PREFIX} <= set(cli.RECONCILE_EXIT_STATUSES)
    assert f"{EXIT_SHARED_PREFIX} --delete refused" in _plain(_subparsers()["reconcile"].description or "")


def test_the_producer_key_table_has_every_key_the_producer_reads() -> None:
    from tests.unit.test_docs_config import _defaults

    section = (DOCS / "consumer.md").read_text().split("## 9. Producer side", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\|\s*`([a-z0-9_.]+)`", section, re.MULTILINE))
    producer_keys = set(_defaults(consumer=False)) - {"message.max.bytes"}  # a bullet: left for librdkafka
    assert sorted(producer_keys - rows) == []


def test_docs_cli_md_has_one_row_per_exit_code_and_every_command_code_is_in_the_table() -> None:
    from gateway.command import COMMAND_EXIT_STATUSES, EXIT_CODES

    rows = re.findall(r"^\| (\d+|128\+N) \|", (DOCS / "cli.md").read_text(), re.MULTILINE)
    assert rows == [*map(str, sorted(EXIT_CODES)), "128+N"]
    for name, statuses in COMMAND_EXIT_STATUSES.items():
        assert set(statuses) <= set(EXIT_CODES), name
