"""``gateway bench --against REF``: the working tree and a git ref measured alternately, on one broker.

A regression guard that remembers figures from an earlier run compares two different machines'
moods; this one compares the two versions of the code side by side. The ref is checked out with
``git worktree add`` into a temporary folder; one broker (and, for the Redis suites, one
redis-server) serves both sides; the sides alternate in pairs, tree then ref, then ref then tree (so that
neither side always runs first), each repetition in a fresh process (:mod:`benchmarks.ab_child`)
with fresh topics. Both sides run the working tree's harness (this package), so a change to the
benchmark itself cannot pass for a change of the library: ``PYTHONPATH`` names the harness first,
then the library under test.

The ref runs on this interpreter when its declared dependencies equal the working tree's; otherwise
(or with ``--ref-venv``) in a virtualenv made for it (``python -m venv`` and a pip install of the
checkout). :mod:`benchmarks.ab_compare` judges the samples.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.ab_child import AB_SUITES, ABSuite
from benchmarks.ab_compare import REF, TREE, Row, any_flagged, as_json, judge_all, markdown_table
from benchmarks.common import ROOT, bench_kafka
from gateway.command import EXIT_AB_MOVED, EXIT_OK, EXIT_USAGE, fail
from gateway.gc.progress import Progress, ProgressLine, ignore
from gateway.testing import KafkaService, RedisServer

CHILD_TIMEOUT = 1200.0
REF_EXTRAS = "redis,s3,gcs,azure,peers,testing"
"""What the ref's virtualenv installs: the child imports ``gateway.testing`` and every store (variants)."""


@dataclass(frozen=True, slots=True)
class Side:
    """How one side runs: which interpreter, and where its ``gateway`` comes from."""

    name: str
    python: str
    library: Path
    how: str


def git(root: Path, *argv: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout.strip()


def resolve_ref(root: Path, ref: str) -> str:
    """The commit ``ref`` names; a ref git does not know is the user's to fix (exit 2)."""
    try:
        return git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except RuntimeError:
        fail(f"--against {ref!r}: not a commit in {root}", EXIT_USAGE)


def tree_label(root: Path) -> str:
    """The working tree's commit, and whether uncommitted changes are measured with it."""
    head = git(root, "rev-parse", "--short", "HEAD")
    dirty = git(root, "status", "--porcelain", "--untracked-files=no")
    return f"{head} + uncommitted changes" if dirty else head


@contextmanager
def checkout(root: Path, commit: str, folder: Path) -> Iterator[Path]:
    """``commit`` checked out (detached) in ``folder``/ref, removed again however the run ends."""
    where = folder / "ref"
    git(root, "worktree", "add", "--detach", "--quiet", str(where), commit)
    try:
        yield where
    finally:
        try:
            git(root, "worktree", "remove", "--force", str(where))
        except RuntimeError:
            git(root, "worktree", "prune")


def dependencies(pyproject: str) -> dict[str, Any]:
    """What an install of the project pulls in: its dependencies, extras and Python range.

    Python 3.10 has no TOML reader: there the whole file stands for them (equal files, equal dependencies).
    """
    if sys.version_info >= (3, 11):
        import tomllib

        project = tomllib.loads(pyproject).get("project", {})
        return {key: project.get(key) for key in ("dependencies", "optional-dependencies", "requires-python")}
    return {"pyproject.toml": pyproject}


def same_dependencies(tree: Path, ref: Path) -> bool:
    return dependencies((tree / "pyproject.toml").read_text()) == dependencies((ref / "pyproject.toml").read_text())


def _project_table(pyproject: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib

        return dict(tomllib.loads(pyproject).get("project", {}))
    return {}


def satisfied_here(pyproject: str) -> bool:
    """Whether this interpreter already has every distribution ``pyproject`` asks for, extras included.

    A ref whose requirements differ only in what this interpreter has anyway (a dependency added since,
    a floor raised that the installed version meets) runs here, so both sides use the same installed
    packages and only ``gateway`` and ``stores`` differ; a virtualenv of its own would resolve its own
    versions, and the comparison would then measure them too.
    """
    if sys.version_info < (3, 11):
        return False
    from importlib import metadata

    try:
        from packaging.requirements import Requirement
    except ImportError:  # no way to read a requirement here: only equal files count
        return False
    project = _project_table(pyproject)
    name = str(project.get("name", ""))
    wanted = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        wanted += extra
    for text in wanted:
        req = Requirement(text)
        if req.name == name or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        try:
            installed = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            return False
        if not req.specifier.contains(installed, prereleases=True):
            return False
    return True


def ref_side(tree: Path, ref: Path, folder: Path, force_venv: bool) -> Side:
    """This interpreter when it has what the ref needs (the checkout on ``PYTHONPATH``), else a virtualenv."""
    if not force_venv and same_dependencies(tree, ref):
        return Side(REF, sys.executable, ref, "this interpreter, PYTHONPATH at the checkout (same dependencies)")
    if not force_venv and satisfied_here((ref / "pyproject.toml").read_text()):
        why = "this interpreter, PYTHONPATH at the checkout (it has every dependency the ref asks for)"
        return Side(REF, sys.executable, ref, why)
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = str(venv / "bin" / "python")
    install = [python, "-m", "pip", "install", "--quiet", f"{ref}[{REF_EXTRAS}]"]
    done = subprocess.run(install, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pip install of the ref failed:\n{done.stderr[-2000:]}")
    reason = "forced by --ref-venv" if force_venv else "its dependencies differ"
    return Side(REF, python, ref, f"its own virtualenv (python -m venv + pip install .[{REF_EXTRAS}]; {reason})")


def harness(folder: Path) -> Path:
    """A folder holding only ``benchmarks`` (the working tree's): first on each child's path, so the
    harness is the same for both sides while ``gateway`` comes from the library named after it."""
    where = folder / "harness"
    where.mkdir()
    (where / "benchmarks").symlink_to(ROOT / "benchmarks", target_is_directory=True)
    return where


def run_side(side: Side, harness_dir: Path, spec: dict[str, Any]) -> dict[str, float]:
    """One repetition of one side in a fresh process; its figures per entry."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(harness_dir), str(side.library)])}
    done = subprocess.run(
        [side.python, "-m", "benchmarks.ab_child"],
        input=json.dumps(spec),
        text=True,
        capture_output=True,
        cwd=harness_dir,  # `-m` puts the working folder first on sys.path: the harness, never a checkout
        env=env,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{side.name} side failed ({done.returncode}):\n{done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    imported = Path(out["gateway"]).resolve()
    if not imported.is_relative_to(side.library.resolve()):  # the proof that the sides ran different code
        raise RuntimeError(f"{side.name} side imported gateway from {imported}, not from {side.library}")
    return {k: float(v) for k, v in out["values"].items()}


@contextmanager
def services(backend: str, suite: ABSuite) -> Iterator[tuple[KafkaService, RedisServer | None]]:
    """One broker and, when the suite needs it, one redis-server, for both sides."""
    with ExitStack() as stack:
        kafka = stack.enter_context(bench_kafka(backend))
        redis_server = stack.enter_context(RedisServer()) if suite.needs_redis else None
        yield kafka, redis_server


@dataclass
class ABRun:
    """Everything one ``--against`` run needs besides the servers."""

    suite: ABSuite
    ref: str
    pairs: int
    tree: Side
    other: Side
    harness: Path
    show: Callable[[Progress], None]
    warmup: int = 1

    def measure(self, kafka: KafkaService, redis_server: RedisServer | None) -> dict[str, dict[str, list[float]]]:
        """The runs of :func:`schedule`, each on fresh topics; the warm-up runs' figures are dropped."""
        samples: dict[str, dict[str, list[float]]] = {TREE: {}, REF: {}}
        runs = schedule(self.pairs, self.warmup)
        run_id = uuid.uuid4().hex[:8]
        sides = {TREE: self.tree, REF: self.other}
        for done, (name, pair) in enumerate(runs):
            side = sides[name]
            where = "warm-up" if pair is None else f"pair {pair + 1} of {self.pairs}"
            self.show(
                Progress("A/B", f"{self.suite.name} against {self.ref}, {where}, {name}", done, len(runs), "runs")
            )
            values = self._run(kafka, redis_server, side, f"{run_id}-{done}")
            if pair is not None:
                for entry, value in values.items():
                    samples[name].setdefault(entry, []).append(value)
        self.show(Progress("A/B", f"{self.suite.name} against {self.ref}", len(runs), len(runs), "runs"))
        return samples

    def _run(self, kafka: KafkaService, redis_server: RedisServer | None, side: Side, tag: str) -> dict[str, float]:
        prefix = f"ab{tag}{side.name}:"
        topics = {k: f"ab-{tag}-{side.name}-{k}" for k in self.suite.topics()}
        for name in topics.values():
            kafka.create_topic(name, partitions=1)
        spec = {
            "bootstrap": kafka.bootstrap_servers,
            "client_config": kafka.client_config,
            "consumer_defaults": kafka.consumer_defaults,
            "redis_url": redis_server.url if redis_server else None,
            "redis_prefix": prefix,
            "suite": self.suite.name,
            "topics": topics,
        }
        try:
            return run_side(side, self.harness, spec)
        finally:
            for name in topics.values():
                kafka.delete_topic(name)
            if redis_server is not None:
                _clear_redis(redis_server, prefix)


def schedule(pairs: int, warmup: int = 1) -> list[tuple[str, int | None]]:
    """The order of the runs: (side, pair), pair ``None`` for an unmeasured warm-up run.

    The warm-up runs come first: a broker just started (its JIT, its page cache) made the first
    run of a null comparison the slowest of its pair in most suites. Then the pairs, and which
    side leads alternates too, so that whatever favours the first (or second) run of a pair falls
    on each side equally often instead of passing for a difference of the code.
    """
    out: list[tuple[str, int | None]] = [(TREE, None)] * warmup
    for pair in range(pairs):
        out += [(TREE, pair), (REF, pair)] if pair % 2 == 0 else [(REF, pair), (TREE, pair)]
    return out


def _clear_redis(server: RedisServer, prefix: str) -> None:
    client = server.client()
    try:
        names = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for i in range(0, len(names), 1000):
            client.unlink(*names[i : i + 1000])
    finally:
        client.close()


def results(run: ABRun, rows: list[Row], kafka: KafkaService, commit: str, started: float) -> dict[str, Any]:
    return {
        "kind": "ab",
        "suite": run.suite.name,
        "against": run.ref,
        "ref_commit": commit,
        "tree": tree_label(ROOT),
        "ref_environment": run.other.how,
        "pairs": run.pairs,
        "kafka": str(kafka.version),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "wall_seconds": time.time() - started,
        "order": "tree, ref | ref, tree | ...",
        "warmup_runs": run.warmup,
        "rows": as_json(rows),
    }


def run_against(
    ref: str,
    suite_name: str,
    *,
    backend: str = "kafka",
    pairs: int = 5,
    out: Path,
    quiet: bool = False,
    force_venv: bool = False,
    warmup: int = 1,
) -> int:
    """Measure, print the table on stdout, write ``out`` (the results JSON); exit 8 when a median moved."""
    suite = AB_SUITES[suite_name]
    started = time.time()
    commit = resolve_ref(ROOT, ref)
    progress = ProgressLine("gateway bench") if not quiet else None
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="gateway-ab-") as tmp:
        if progress is not None:
            stack.enter_context(progress)
        folder = Path(tmp)
        ref_root = stack.enter_context(checkout(ROOT, commit, folder))
        tree = Side(TREE, sys.executable, ROOT, "this interpreter")
        other = ref_side(ROOT, ref_root, folder, force_venv)
        run = ABRun(suite, ref, pairs, tree, other, harness(folder), progress or ignore, warmup)
        kafka, redis_server = stack.enter_context(services(backend, suite))
        samples = run.measure(kafka, redis_server)
        rows = judge_all(suite.entries(), samples)
        data = results(run, rows, kafka, commit, started)
    if progress is not None:
        progress.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    print(summary(data, rows))
    print(f"results: {out}")
    return exit_status(rows)


def exit_status(rows: list[Row]) -> int:
    """8 when an entry moved (a script or CI job branches on it), else 0; the table says which entry and which way."""
    return EXIT_AB_MOVED if any_flagged(rows) else EXIT_OK


def summary(data: dict[str, Any], rows: list[Row]) -> str:
    moved = [r.entry.name for r in rows if r.flagged]
    verdict = f"moved outside the other side's spread: {', '.join(moved)}" if moved else "no median moved"
    return "\n".join(
        [
            f"A/B {data['suite']}: tree {data['tree']} against {data['against']} ({data['ref_commit'][:10]}), "
            f"{data['pairs']} pairs alternating on {data['kafka']}; ref ran on {data['ref_environment']}",
            "",
            markdown_table(rows),
            "",
            verdict,
        ]
    )
