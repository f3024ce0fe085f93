"""``gateway bench --against HEAD --suite tiny``, the whole command on the session's broker.

The arithmetic is covered in tests/unit/test_bench_ab.py; this runs what a developer runs: the ref
checked out with ``git worktree add``, both sides alternating in fresh processes on one broker,
the table on stdout, progress on stderr, the results JSON, and the checkout removed afterwards.
Figures are never asserted (a shared machine moves them); only that each is there, per side and
pair, and that the exit status agrees with the flags.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.ab_child import AB_SUITES
from gateway.command import EXIT_AB_MOVED, EXIT_OK
from gateway.testing import KafkaService

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    # the command creates and deletes a topic per side and repetition through the admin API
    pytest.mark.requires("create_topics"),
]


def _git(*argv: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True, check=True).stdout


def test_bench_against_head_runs_both_sides_alternately_and_reports_each_entry(
    kafka: KafkaService, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "KAFKA_CLIENT_CONFIG": json.dumps(kafka.client_config),
    }
    argv = ["bench", "--against", "HEAD", "--suite", "tiny", "--pairs", "3", "--backend", "external"]
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", *argv, "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
        check=False,
    )
    assert done.returncode in (EXIT_OK, EXIT_AB_MOVED), done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "gateway bench: A/B tiny against HEAD" in done.stderr  # progress, on stderr only
    data = json.loads((tmp_path / "ab-tiny.json").read_text())
    assert data["ref_commit"] == _git("rev-parse", "HEAD").strip()
    assert data["ref_environment"].startswith("this interpreter")  # HEAD's dependencies are the tree's
    names = [e.name for e in AB_SUITES["tiny"].entries()]
    assert [row["entry"]["name"] for row in data["rows"]] == names
    for row in data["rows"]:
        assert len(row["tree"]["samples"]) == len(row["ref"]["samples"]) == 3
        assert all(x > 0 for x in row["tree"]["samples"] + row["ref"]["samples"])
    flagged = any(row["flagged"] for row in data["rows"])
    assert done.returncode == (EXIT_AB_MOVED if flagged else EXIT_OK)
    assert "| entry | tree: median (min-max) | ref: median (min-max)" in done.stdout
    assert all(f"| {name} (" in done.stdout for name in names)
    assert "gateway-ab-" not in _git("worktree", "list")  # the ref's checkout is gone again
