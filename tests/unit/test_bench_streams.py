"""``gateway bench --suite streams``: its flags' decisions, its results file, and the page's section, from a small
results fixture (no benchmark runs here, nothing timed)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import command, report, stream_memory, stream_report
from benchmarks.command import COMMAND, run_argv, streams_argv
from benchmarks.common import RESULTS
from gateway.command import EXIT_USAGE, CommandError

MiB = 1024 * 1024
GiB = 1024 * MiB


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    COMMAND.add_arguments(parser)
    return parser.parse_args(argv)


def _run(size: int, growth_mib: float, consumer_mib: float, *, equal: bool = True) -> dict[str, Any]:
    return {
        "size": size, "part": 8 * MiB, "range": 8 * MiB, "pairs": 1, "started": "2026-11-29 01:10 UTC",
        "wall_seconds": 150.0,
        "env": {
            "kafka": "Apache Kafka 4.1.2", "kafka_backend": "kafka", "redis": "redis 7.0.15", "cpus": 2, "python": "3"
        },
        "produce_stream": [{"growth_bytes": int(growth_mib * MiB), "seconds": size / MiB / 100, "stored": size}],
        "raw": [{"growth_bytes": 30 * MiB, "seconds": size / MiB / 120, "stored": size}],
        "consumer": [{
            "growth_bytes": int(consumer_mib * MiB), "seconds": size / MiB / 80, "read": size, "sha256": "ab",
            "raw_growth_bytes": 20 * MiB, "raw_seconds": size / MiB / 90, "raw_read": size, "digest_equal": equal,
        }],
    }  # fmt: skip


def _results() -> dict[str, Any]:
    return {"kind": "streams", "stores": {"redis": _run(4 * GiB, 12.7, 40.5), "s3": _run(GiB, 14.2, 30.0)}}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--suite", "streams"], "pass --update-docs"),
        (["--suite", "streams", "--update-docs", "--quick"], "run without --quick"),
        (["--suite", "streams", "--update-docs", "--out", "x"], "--out is for other runs"),
        (["--suite", "streams", "--against", "main"], "not streams"),
    ],
)
def test_misplaced_stream_runs_are_refused_with_exit_2(argv: list[str], says: str) -> None:
    with pytest.raises(CommandError, match=says) as refused:
        run_argv(_args(*argv))
    assert refused.value.code == EXIT_USAGE


def test_the_suite_is_offered_and_explained_in_the_help() -> None:
    parser = argparse.ArgumentParser()
    COMMAND.add_arguments(parser)
    text = parser.format_help() + COMMAND.description
    assert "streams" in text and "benchmarks/results/streams.json" in COMMAND.description
    assert _args("--suite", "streams", "--update-docs").suite == "streams"


def test_each_store_runs_at_its_size_into_the_tracked_results() -> None:
    out = str(RESULTS / "streams.json")
    assert streams_argv(_args("--suite", "streams", "--update-docs", "--backend", "tansu")) == [
        ["--stores", "redis", "--gib", "4", "--backend", "tansu", "--json", out],
        ["--stores", "s3", "--gib", "1", "--backend", "tansu", "--json", out],
    ]


@pytest.mark.parametrize("failing", [None, 0, 1])
def test_the_runs_then_the_page_and_a_failed_run_stops_there(monkeypatch: pytest.MonkeyPatch, failing: Any) -> None:
    calls: list[Any] = []

    def measure(argv: list[str]) -> int:
        calls.append(argv[1])
        return 1 if len(calls) - 1 == failing else 0

    monkeypatch.setattr(stream_memory, "main", measure)
    monkeypatch.setattr(report, "main", lambda argv: calls.append("page") or 0)
    status = COMMAND.run(_args("--suite", "streams", "--update-docs"))
    if failing is None:
        assert (status, calls) == (0, ["redis", "s3", "page"])
    else:
        assert (status, calls) == (1, ["redis", "s3"][: failing + 1])
    assert command.STREAM_RUNS == (("redis", 4.0), ("s3", 1.0))


def test_a_run_of_one_store_keeps_the_others_figures(tmp_path: Path) -> None:
    out = tmp_path / "streams.json"
    whole = _results()
    stream_memory.write_results(out, {"kind": "streams", "stores": {"redis": whole["stores"]["redis"]}})
    stream_memory.write_results(out, {"kind": "streams", "stores": {"s3": whole["stores"]["s3"]}})
    assert stream_report.load_streams(out) == whole
    newer = _run(4 * GiB, 11.0, 39.0)
    stream_memory.write_results(out, {"kind": "streams", "stores": {"redis": newer}})
    assert json.loads(out.read_text())["stores"] == {"redis": newer, "s3": whole["stores"]["s3"]}


def test_the_section_has_a_row_per_store_with_every_figure() -> None:
    text = stream_report.section_streams(_results())
    assert text.startswith("## Streams larger than memory")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| store | size | part / range | producer peak RSS growth | consumer peak RSS growth")
    redis, s3 = rows[1].split(" | "), rows[2].split(" | ")
    assert redis[:6] == ["| Redis", "4 GiB", "8 MiB / 8 MiB", "12.7 MiB", "40.5 MiB", "yes"]
    assert redis[6:] == ["100.0 MiB/s", "120.0 MiB/s", "80.0 MiB/s", "90.0 MiB/s", "yes |"]
    assert s3[:3] == ["| S3 (moto)", "1 GiB", "8 MiB / 8 MiB"]
    assert "Apache Kafka 4.1.2 (kafka backend)" in text


def test_the_section_says_when_the_bound_or_the_digest_was_missed() -> None:
    data = {"kind": "streams", "stores": {"redis": _run(4 * GiB, 12.0, 200.0, equal=False)}}
    row = next(line for line in stream_report.section_streams(data).splitlines() if line.startswith("| Redis"))
    assert row.split(" | ")[5] == "**no**" and row.endswith("**no** |")


def test_no_results_no_section(tmp_path: Path) -> None:
    assert stream_report.section_streams(None) == ""
    assert stream_report.load_streams(tmp_path / "absent.json") is None
    (tmp_path / "other.json").write_text(json.dumps({"kind": "clouds"}))
    assert stream_report.load_streams(tmp_path / "other.json") is None


def test_the_page_has_the_section_beside_the_memory_sections(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "streams.json"
    results.write_text(json.dumps(_results()))
    monkeypatch.setattr(stream_report, "STREAMS_RESULTS", results)
    routes = json.loads(report.newest_results().read_text())
    routes.setdefault("name", "routes")
    images = {name: tmp_path / f"{name}.png" for name in ("throughput", "ratio", "latency", "mixes")}
    headings = [
        line for line in report.render(routes, images, tmp_path / "b.md").splitlines() if line.startswith("## ")
    ]
    streams = headings.index("## Streams larger than memory")  # beside the other memory figures
    assert headings.index("## Consumer memory") < streams < headings.index("## Plain passthrough")
