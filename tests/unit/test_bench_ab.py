"""``gateway bench --against REF``: the verdict on the two sides' samples, and the flags that choose a run.

The arithmetic is pure (:mod:`benchmarks.ab_compare`), so these tests give it samples and check
the medians, spreads, pair ratios and flags it reports; the command's decisions (which suite, where
the results go) are checked without starting a broker. ``tests/integration/test_bench_against.py``
runs the whole command against ``HEAD``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks import ab, report
from benchmarks.ab import exit_status
from benchmarks.ab_child import AB_SUITES
from benchmarks.ab_compare import (
    REF,
    TREE,
    Entry,
    Spread,
    as_json,
    from_json,
    judge,
    judge_all,
    markdown_table,
)
from benchmarks.command import AB_SUITE_NAMES, COMMAND, ab_results_path, refuse_misplaced_numbers
from gateway.command import EXIT_AB_MOVED, EXIT_OK, EXIT_USAGE, CommandError

MBPS = Entry("chunked 6 x 8 MB consume", "MB/s")


def test_a_spread_is_the_median_and_the_extremes_of_the_repetitions() -> None:
    spread = Spread.of([3.0, 1.0, 10.0, 2.0, 4.0])
    assert (spread.median, spread.low, spread.high) == (3.0, 1.0, 10.0)
    assert spread.holds(1.0) and spread.holds(10.0) and not spread.holds(10.5)
    with pytest.raises(ValueError):
        Spread.of([])


def test_overlapping_sides_are_the_same_and_the_ratio_carries_the_pairs_spread() -> None:
    row = judge(MBPS, [100.0, 120.0, 90.0], [110.0, 95.0, 130.0])
    assert not row.flagged and row.verdict == "same"
    assert row.ratio == pytest.approx(100.0 / 110.0)
    assert row.pair_ratios.samples == pytest.approx((100 / 110, 120 / 95, 90 / 130))
    assert (row.pair_ratios.low, row.pair_ratios.high) == pytest.approx((90 / 130, 120 / 95))


def test_a_median_outside_the_other_sides_spread_is_flagged_either_way() -> None:
    slower = judge(MBPS, [50.0, 60.0, 55.0], [100.0, 58.0, 110.0])  # ref's median 100 is above all the tree's
    assert slower.flagged and slower.verdict == "worse"
    faster = judge(MBPS, [100.0, 58.0, 110.0], [50.0, 60.0, 55.0])
    assert faster.flagged and faster.verdict == "better"


def test_the_refs_median_outside_the_trees_spread_is_flagged_though_the_trees_is_inside_the_refs() -> None:
    row = judge(MBPS, [50.0, 60.0, 200.0], [40.0, 45.0, 210.0])  # 60 lies in 40-210, but 45 not in 50-200
    assert row.flagged and row.verdict == "better"


def test_when_lower_is_better_a_higher_median_is_worse() -> None:
    peak = Entry("consume(500) peak RSS growth", "MiB", higher_is_better=False)
    assert judge(peak, [180.0, 170.0, 190.0], [40.0, 41.0, 42.0]).verdict == "worse"
    assert judge(peak, [40.0, 41.0, 42.0], [180.0, 170.0, 190.0]).verdict == "better"


def test_the_sides_ran_in_pairs_so_their_counts_must_match() -> None:
    with pytest.raises(ValueError, match="3 tree repetitions against 2"):
        judge(MBPS, [1.0, 2.0, 3.0], [1.0, 2.0])


def test_a_flagged_entry_exits_8_and_none_exits_0() -> None:
    entries = [MBPS, Entry("produce", "MB/s")]
    same = {
        TREE: {MBPS.name: [1.0, 2.0, 3.0], "produce": [5.0, 6.0, 7.0]},
        REF: {MBPS.name: [2.0, 2.5, 1.5], "produce": [6.0, 5.5, 6.5]},
    }
    assert exit_status(judge_all(entries, same)) == EXIT_OK
    moved = {**same, TREE: {**same[TREE], "produce": [1.0, 1.1, 1.2]}}
    rows = judge_all(entries, moved)
    assert exit_status(rows) == EXIT_AB_MOVED == 8
    assert [r.flagged for r in rows] == [False, True]


def test_the_table_shows_both_medians_both_spreads_and_the_ratio_with_its_spread() -> None:
    row = judge(MBPS, [50.0, 60.0, 55.0], [100.0, 90.0, 110.0])
    table = markdown_table([row])
    cells = "| 55 (50-60) | 100 (90-110) | 0.55 (0.50-0.67) | **worse** |"
    assert f"| chunked 6 x 8 MB consume (MB/s) {cells}" in table
    assert from_json(json.loads(json.dumps(as_json([row])))) == [row]  # the page re-renders what was written


def test_a_warm_up_run_first_then_pairs_whose_leading_side_alternates() -> None:
    assert ab.schedule(3) == [(TREE, None), (TREE, 0), (REF, 0), (REF, 1), (TREE, 1), (TREE, 2), (REF, 2)]
    assert ab.schedule(2, warmup=0) == [(TREE, 0), (REF, 0), (REF, 1), (TREE, 1)]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    COMMAND.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--suite", "tiny"], "pass --against REF"),
        (["--against", "main"], "not routes"),
        (["--against", "main", "--suite", "chunked", "--quick"], "no quick mode"),
        (["--against", "main", "--suite", "chunked", "--pairs", "2"], "at least 3"),
        (["--against", "main", "--suite", "chunked", "--warmup", "-1"], "0 or more"),
        (["--against", "main", "--suite", "redis", "--update-docs", "--out", "x"], "--out is for other runs"),
    ],
)
def test_an_ab_run_that_cannot_mean_anything_is_refused(argv: list[str], says: str) -> None:
    with pytest.raises(CommandError, match=says) as refused:
        refuse_misplaced_numbers(_args(*argv))
    assert refused.value.code == EXIT_USAGE


def test_the_command_offers_every_ab_suite_and_an_ab_run_writes_the_tracked_results_only_when_asked() -> None:
    assert set(AB_SUITE_NAMES) == set(AB_SUITES)
    args = _args("--against", "main", "--suite", "chunked")
    refuse_misplaced_numbers(args)  # needs no --update-docs: its results go to a fresh folder
    assert ab_results_path(args, new_folder=lambda: "/tmp/fresh") == Path("/tmp/fresh/ab-chunked.json")
    tracked = ab_results_path(_args("--against", "main", "--suite", "chunked", "--update-docs"))
    assert tracked == report.RESULTS / "ab-chunked.json"


def test_each_suite_names_its_entries_and_the_topics_a_repetition_needs() -> None:
    tiny = AB_SUITES["tiny"]
    names = [e.name for e in tiny.entries()]
    assert names == [
        "chunked 2 x 2 MB produce",
        "chunked 2 x 2 MB consume",
        "2000 x 100 B poll()",
        "2000 x 100 B consume(500)",
        "2000 x 100 B produce()",
    ]
    assert tiny.topics() == ["w0", "pt-read", "pt-write"] and not tiny.needs_redis
    assert AB_SUITES["redis"].needs_redis


def test_the_ref_reuses_this_interpreter_only_when_its_dependencies_are_the_same(tmp_path: Path) -> None:
    tree, ref = tmp_path / "tree", tmp_path / "ref"
    for where in (tree, ref):
        where.mkdir()
    project = '[project]\nname = "x"\ndependencies = ["confluent-kafka>=2.13"]\n'
    (tree / "pyproject.toml").write_text(project + "# a comment and a tool table do not matter\n[tool.ruff]\n")
    (ref / "pyproject.toml").write_text(project)
    assert ab.same_dependencies(tree, ref)
    (ref / "pyproject.toml").write_text(project.replace("2.13", "2.12"))
    assert not ab.same_dependencies(tree, ref)


def test_a_ref_whose_every_dependency_is_installed_here_runs_on_this_interpreter() -> None:
    """Only ``gateway`` and ``stores`` may differ between the sides: a ref asking for nothing new runs here."""
    from importlib import metadata

    ck = metadata.version("confluent-kafka")
    here = f'[project]\nname = "kafka-hybrid-gateway"\ndependencies = ["confluent-kafka>={ck}"]\n'
    extras = '[project.optional-dependencies]\nall = ["kafka-hybrid-gateway[x]"]\nold = ["x; python_version < \'3\'"]\n'
    assert ab.satisfied_here(here + extras)
    assert not ab.satisfied_here(here.replace(f">={ck}", f">{ck}"))
    assert not ab.satisfied_here(here.replace("confluent-kafka", "no-such-distribution-here"))


def test_the_page_shows_each_ab_run_with_its_table(tmp_path: Path) -> None:
    row = judge(MBPS, [50.0, 60.0, 55.0], [52.0, 58.0, 54.0])
    run = {
        "kind": "ab",
        "suite": "chunked",
        "against": "61051fd",
        "ref_commit": "61051fd3ff" + "0" * 30,
        "tree": "abc1234",
        "ref_environment": "this interpreter",
        "pairs": 3,
        "kafka": "Apache Kafka 4.1.2",
        "started": "2026-11-28T18:00:00+0000",
        "rows": as_json([row]),
    }
    (tmp_path / "ab-chunked.json").write_text(json.dumps(run))
    (tmp_path / "other.json").write_text(json.dumps({"kind": "clouds"}))
    section = report.section_ab(report.load_ab(tmp_path))
    assert section.startswith("## A/B against a git ref")
    assert "**chunked**: tree abc1234 against `61051fd`" in section
    assert "| chunked 6 x 8 MB consume (MB/s) | 55 (50-60) | 54 (52-58) | 1.02 (0.96-1.03) |  |" in section
    assert report.section_ab([]) == ""
