"""``gateway bench`` writes where it is told and touches the tracked page only when asked, from a full run.

Before, ``gateway bench --quick`` overwrote docs/benchmarks.md, its four plots and the results JSON
with quick-mode numbers. These tests check the flags' decisions without running a benchmark.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import __main__ as bench_main
from benchmarks import report
from benchmarks.command import COMMAND, run_argv
from gateway.command import EXIT_USAGE, CommandError

ROOT = Path(__file__).resolve().parents[2]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    COMMAND.add_arguments(parser)
    return parser.parse_args(argv)


def _folder() -> str:
    return "/tmp/chosen-by-tempfile"


def test_a_run_writes_its_results_page_and_plots_to_a_new_folder_by_default() -> None:
    argv = run_argv(_args(), new_folder=_folder)
    assert argv == [
        "--backend",
        "kafka",
        "--output",
        "/tmp/chosen-by-tempfile/routes-full.json",
        "--docs",
        "/tmp/chosen-by-tempfile/benchmarks.md",
    ]


def test_out_names_the_folder_of_a_quick_run(tmp_path: Path) -> None:
    argv = run_argv(_args("--quick", "--out", str(tmp_path)), new_folder=_folder)
    assert argv[argv.index("--output") + 1] == str(tmp_path / "routes-quick.json")
    assert argv[argv.index("--docs") + 1] == str(tmp_path / "benchmarks.md")
    assert "--quick" in argv


def test_only_update_docs_leaves_the_tracked_page_and_results_as_the_destination() -> None:
    assert run_argv(_args("--update-docs"), new_folder=_folder) == ["--backend", "kafka"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--quick", "--update-docs"], "run without --quick"),
        (["--update-docs", "--out", "x"], "--out is for other runs"),
        (["--suite", "encryption"], "pass --update-docs"),
        (["--suite", "clouds", "--update-docs", "--quick"], "run without --quick"),
    ],
)
def test_what_would_put_numbers_where_they_do_not_belong_is_refused(argv: list[str], says: str) -> None:
    with pytest.raises(CommandError, match=says) as refused:
        run_argv(_args(*argv), new_folder=_folder)
    assert refused.value.code == EXIT_USAGE


def test_python_m_benchmarks_quick_leaves_the_full_mode_page_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rendered: list[Any] = []

    class Suite:
        def __init__(self, *args: Any) -> None:
            pass

        def run(self) -> dict[str, Any]:
            return {"mode": "quick"}

    monkeypatch.setattr(bench_main, "Suite", Suite)
    monkeypatch.setattr(report, "main", lambda *a, **k: rendered.append(a) or 0)
    assert bench_main.main(["--quick", "--plain", "--output", str(tmp_path / "r.json")]) == 0
    assert rendered == [] and "left as it is" in capsys.readouterr().out
    assert bench_main.main(["--quick", "--plain", "--output", str(tmp_path / "r.json"), "--docs", "x.md"]) == 0
    assert rendered == [([str(tmp_path / "r.json"), "--docs", "x.md"],)]


def test_the_page_renders_the_newest_full_run_even_when_a_quick_one_is_newer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "routes-full.json").write_text(json.dumps({"mode": "full", "started": "2026-01-01"}))
    (tmp_path / "routes-quick.json").write_text(json.dumps({"mode": "quick", "started": "2026-02-01"}))
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    assert report.newest_results() == tmp_path / "routes-full.json"


def test_the_page_opens_with_which_route_when_and_the_plots_and_ends_with_the_profiles() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    headings = [line for line in page.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Which route when (measured)"
    plots = [i for i, h in enumerate(headings) if h in ("## Throughput by size", "## End-to-end latency")]
    assert plots and max(plots) < headings.index("## Targets")
    profiles = headings.index("## Where the time goes (profiles of missed targets)")
    assert profiles > headings.index("## Plain passthrough")
    assert page.index("](img/bench-throughput.png)") < page.index("## Targets")
