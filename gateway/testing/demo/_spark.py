"""``gateway demo``'s Spark stage: the demo topic through ``hybrid-kafka``, as a batch job, a sink and a stream.

It runs after the Kafka routes, in one Spark session (starting one costs 10-20 s on two cores):

1. a batch job reads the demo topic, hashes every value in the executors and checks each row
   against what the producer sent, by SHA-256; rows and bytes per route;
2. the same rows, each with its own SHA-256 appended (a checksum trailer), go through the
   ``hybrid-kafka`` sink to a second topic, where the sink's policy routes them again, and a
   :class:`~gateway.HybridConsumer` checks every one;
3. a second wave is produced in two halves; after each half, a streaming query with a checkpoint
   (Kafka to Kafka, through the sink) drains what is new and stops; the second run is a restart
   from the checkpoint. The output must hold every message of the wave exactly once.

The checks themselves are in :mod:`gateway.testing.demo._checks`. Spark's own output (the JVM's
warnings, the Python workers' stderr) goes to a log file, kept and named when the stage fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gateway.testing.demo._checks import TRAILER, Check, check_rows, check_runs, end_offsets, read_copy
from gateway.testing.demo._env import DemoEnv
from gateway.testing.demo._model import DemoOptions, DemoResult, Sent
from gateway.testing.demo._report import TableRow
from gateway.testing.demo._routes import (
    MOCK_MAX_PARTITIONS,
    Plan,
    demo_policy,
    demo_producer,
    payload_for,
    plan,
)

SESSION_CONF = {"spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "2"}
JAVA_MIN = 17
_DEFERRED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
STEPS = {
    "read": "rows read match by SHA-256",
    "copy": "copies verified by HybridConsumer",
    "stream": "wave messages written exactly once across a restart",
}


@dataclass
class SparkStage:
    """The stage's share of the report (see :class:`gateway.testing.demo._report.Stage`)."""

    master: str
    name: str = "Spark stage"
    seconds: float = 0.0
    rows: list[TableRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checks: dict[str, Check] = field(default_factory=dict)
    error: str | None = None

    @property
    def title(self) -> str:
        return f"Spark {self.seconds:.1f} s on {self.master}"

    @property
    def ok(self) -> bool:
        return self.error is None and self.checks.keys() == STEPS.keys() and all(c.ok for c in self.checks.values())

    def verdict(self) -> str:
        parts = [f"{check.verified}/{check.expected} {STEPS[name]}" for name, check in self.checks.items()]
        problems = [p for c in self.checks.values() for p in c.problems]
        if self.error is not None:
            problems.insert(0, self.error)
        return "; ".join(parts or ["nothing verified"]) + "".join(f"\n  {p}" for p in problems[:5])


def missing_requirement() -> str | None:
    """Why Spark cannot run here (no PySpark, no Java 17+), in one line; None when it can.

    The java looked at is the one PySpark starts: ``$JAVA_HOME/bin/java``, else ``java`` on ``PATH``.
    """
    if importlib.util.find_spec("pyspark") is None:
        return "PySpark is not installed (pip install 'kafka-hybrid-gateway[spark]')"
    java_home = os.environ.get("JAVA_HOME", "").strip()
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if java is None:
        return f"no java on PATH: Spark needs Java {JAVA_MIN} or newer (or set JAVA_HOME)"
    if not Path(java).is_file():
        return f"JAVA_HOME={java_home} has no bin/java: Spark needs Java {JAVA_MIN} or newer"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{java} -version failed: {exc}"
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if found is not None:
        major = int(found.group(2) or 0) if found.group(1) == "1" else int(found.group(1))  # "1.8.0" is Java 8
        if major < JAVA_MIN:
            return f"{java} is Java {major}: Spark needs Java {JAVA_MIN} or newer"
    return None


def spark_stage(options: DemoOptions, env: DemoEnv, result: DemoResult, console: Any) -> SparkStage | None:
    """Run the stage; None, with one line on screen, when it cannot run here."""
    from rich.text import Text

    reason = missing_requirement()
    if reason is None and not result.ok:
        reason = "the Kafka routes did not verify"
    if reason is None and not (result.kept and wave_plan(options, env)[1].kept):
        reason = (
            f"the embedded cluster keeps ~5 MiB in each of at most {MOCK_MAX_PARTITIONS} partitions, less than "
            "these messages need until Spark reads them: use fewer (--count, --wave) or --kafka kafka"
        )
    if reason is None and env.store_options is None and any(s.route.startswith("ref") for s in result.sent.values()):
        reason = "a store is an in-process stand-in, which Spark's executors cannot reach"
    if reason is not None:
        console.print(Text("Spark stage skipped: ", style="yellow") + Text(reason), soft_wrap=True)
        return None
    stage = SparkStage(options.spark_master or "local[2]")
    work = Path(tempfile.mkdtemp(prefix="gw-demo-spark-"))
    log = work / "spark.log"
    started = time.monotonic()
    try:
        with console.status(f"Spark: starting a session on {stage.master}") as status, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
            run_stage(options, env, result, stage, work, lambda text: status.update(f"Spark: {text}"))
    except BaseException:  # interrupted (SIGTERM, Ctrl-C): the demo removes what it made on the way out
        shutil.rmtree(work, ignore_errors=True)
        raise
    stage.seconds = time.monotonic() - started
    if stage.ok:
        shutil.rmtree(work, ignore_errors=True)
    else:  # the log stays for the reader
        stage.notes.append(f"Spark's own log: {log}")
    return stage


def run_stage(
    options: DemoOptions, env: DemoEnv, result: DemoResult, stage: SparkStage, work: Path, say: Callable[[str], None]
) -> None:
    """Start the session, run the steps, stop it; a failure becomes the stage's one-line error."""
    started = time.monotonic()
    try:
        spark = start_session(stage.master, work, work / "spark.log")
        stage.rows.append(TableRow(f"Spark session start ({time.monotonic() - started:.1f} s)"))
        try:
            run_steps(spark, options, env, result, stage, work, say)
        finally:  # a stop that fails must not hide why the stage ended (a SIGTERM mid-call confuses py4j)
            with contextlib.suppress(Exception):
                spark.stop()
    except Exception as exc:  # noqa: BLE001 - the stage fails in one line; the report still prints
        first = next((line for line in str(exc).splitlines() if line.strip()), "(no message)")
        stage.error = f"{type(exc).__name__}: {first[:300]}"


def start_session(master: str, work: Path, log: Path) -> Any:
    """One session for the whole stage; on a cluster, the package goes to the executors as a zip."""
    from gateway.spark import local_session, register

    conf = {**SESSION_CONF, "spark.local.dir": str(work / "local")}
    if not master.startswith("local"):
        conf["spark.submit.pyFiles"] = str(package_zip(work))
        if re.match(r"spark://(127\.0\.0\.1|localhost)[:/]", master):  # a cluster on loopback, as the servers are
            conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    with signals_deferred(), stderr_to(log):  # the JVM, and the Python workers it starts, keep this stderr
        spark = local_session(master, app_name="gateway-demo", conf=conf)
    register(spark)
    return spark


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGTERM, SIGHUP and SIGINT act when the block ends, not inside it.

    Interrupted while PySpark launches its JVM, the driver removes the folder where the JVM is about
    to write its port; the JVM's main thread dies of that before it starts watching the driver, and
    its py4j server thread keeps it alive with no parent: every interrupted launch left a JVM behind.
    Once launched, the JVM exits by itself when the driver goes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum)) for sig in _DEFERRED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            signal.raise_signal(caught[0])


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """File descriptor 2 goes to ``path`` for the duration: what this process starts meanwhile keeps it."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with path.open("ab") as file:
            os.dup2(file.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def package_zip(work: Path) -> Path:
    """``gateway`` and ``stores`` as they are here, for executors that do not have them installed."""
    import gateway
    from gateway.store_registry import stores_package

    target = work / "kafka_hybrid_gateway.zip"
    with zipfile.ZipFile(target, "w") as archive:
        for package in (Path(gateway.__file__).parent, stores_package()):
            for path in sorted(package.rglob("*.py")):
                archive.write(path, str(path.relative_to(package.parent)))
    return target


def run_steps(
    spark: Any,
    options: DemoOptions,
    env: DemoEnv,
    result: DemoResult,
    stage: SparkStage,
    work: Path,
    say: Callable[[str], None],
) -> None:
    copy_topic, stream_topic = f"{result.topic}-copy", f"{result.topic}-stream"
    for name in (copy_topic, stream_topic):
        env.create_topic(name, env.partitions or 1)
    stage.notes.append(f"Spark: the sink wrote to {copy_topic}, the stream to {stream_topic}")
    steps: list[tuple[str, str, Callable[[list[TableRow]], Check]]] = [
        ("read", "batch read", lambda rows: read_and_verify(spark, env, result, rows)),
        ("copy", "sink copy", lambda rows: copy_through_sink(spark, options, env, result, copy_topic, rows)),
        (
            "stream",
            "stream",
            lambda rows: stream_wave(spark, options, env, result.topic, stream_topic, work, rows, say),
        ),
    ]
    for name, label, step in steps:
        say(label)
        started = time.monotonic()
        rows: list[TableRow] = []
        stage.checks[name] = step(rows)
        stage.rows += [TableRow(f"Spark {label} ({time.monotonic() - started:.1f} s)"), *rows]


def source_options(env: DemoEnv) -> dict[str, str]:
    kafka = {f"kafka.{k}": str(v) for k, v in env.kafka.client_config.items()}
    return {**kafka, "kafka.bootstrap.servers": env.bootstrap, **(env.store_options or {})}


def sink_options(options: DemoOptions, env: DemoEnv) -> dict[str, str]:
    """The sink's own policy: chunks of the demo's segment size, references to the demo's first store."""
    _, store = demo_policy(options, env.stores)
    out = {**source_options(env), "max.message.segment.bytes": str(options.segment_bytes)}
    if store is not None:
        out.update({"reference.above": str(options.reference_above), "reference.store": store})
    return out


def transformed(env: DemoEnv) -> list[Any]:
    """The copy's columns: the key, the value with its SHA-256 appended, and the partition it came from."""
    from pyspark.sql import functions as F

    value = F.concat(F.col("value"), F.unhex(F.sha2(F.col("value"), 256))).alias("value")
    return [F.col("key"), value] + ([F.col("partition")] if env.partitions else [])


def read_and_verify(spark: Any, env: DemoEnv, result: DemoResult, rows: list[TableRow]) -> Check:
    """Every row's SHA-256, computed in the executors, against what the producer sent under its key."""
    from pyspark.sql import functions as F

    frame = spark.read.format("hybrid-kafka").options(**source_options(env)).option("subscribe", result.topic).load()
    got = frame.select(
        "key", "route", "error", F.length("value").alias("size"), F.sha2(F.col("value"), 256).alias("sha256")
    ).collect()
    check, routes = check_rows(got, result.sent)
    for route, figures in sorted(routes.items()):
        verified = f"{figures.verified:,}/{figures.messages:,}"
        rows.append(TableRow(f"  {route}", figures.messages, figures.payload_bytes, verified))
    return check


def copy_through_sink(
    spark: Any, options: DemoOptions, env: DemoEnv, result: DemoResult, target: str, rows: list[TableRow]
) -> Check:
    """The transformed rows through the sink; then a consumer checks each, and the store what it holds."""
    frame = spark.read.format("hybrid-kafka").options(**source_options(env)).option("subscribe", result.topic).load()
    sink = sink_options(options, env)
    frame.select(*transformed(env)).write.format("hybrid-kafka").options(**sink).option("topic", target).save()
    routes = sink_routes(sink, env, target, {key: sent.size + TRAILER for key, sent in result.sent.items()})
    check = read_copy(env, target, "copy", result.sent)
    per_route: dict[str, list[int]] = {}
    for key, sent in result.sent.items():
        figures = per_route.setdefault(routes[key], [0, 0, 0])
        figures[0] += 1
        figures[1] += sent.size + TRAILER
        figures[2] += key in check.passed
    for route, (count, size, verified) in sorted(per_route.items()):
        rows.append(TableRow(f"  {route}", count, size, f"{verified:,}/{count:,}"))
    references = sum(1 for route in routes.values() if route.startswith("reference"))
    store = env.stores.get(sink.get("reference.store", ""))
    held = 0 if store is None else sum(1 for _ in store.list_locators(target))
    if held != references:
        check.problem(f"copy: the sink's policy sends {references} rows by reference, the store holds {held}")
    return check


def sink_routes(sink: Mapping[str, str], env: DemoEnv, topic: str, sizes: Mapping[bytes, int]) -> dict[bytes, str]:
    """The route of each row, asked of a producer built from the sink's options as every sink task builds its own."""
    from gateway.spark.sink import parse_sink_options

    producer = parse_sink_options(sink).producer(env.stores)
    try:
        return {key: str(producer.route_for(topic, size)) for key, size in sizes.items()}
    finally:
        producer.close()


def wave_plan(options: DemoOptions, env: DemoEnv) -> tuple[DemoOptions, Plan]:
    """The second wave: the same mix from another seed, more of it large, none above twice the reference size."""
    wave = replace(
        options,
        count=options.wave,
        seed=options.seed + 1,
        large_fraction=max(options.large_fraction, 0.1),
        max_size=max(options.min_size, min(options.max_size, 2 * options.reference_above)),
    )
    return wave, plan(wave, env.window, demo_policy(options, env.stores)[1], env.partitions)


def produce_wave(
    options: DemoOptions, env: DemoEnv, topic: str, wave: DemoOptions, sending: Plan, half: list[tuple[int, int]]
) -> dict[bytes, Sent]:
    producer = demo_producer(options, env)
    sent: dict[bytes, Sent] = {}
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for index, size in half:
        value, key = payload_for(index, size, wave.seed), f"wave-{index}".encode()
        partition = sending.placement.get(index, -1)
        route = producer.route_for(topic, size, key)
        producer.produce(topic, value, key=key, partition=partition, route=route, on_delivery=delivered)
        sent[key] = Sent(str(route), hashlib.sha256(value).hexdigest(), size, partition)
        producer.poll(0)
    left = producer.flush(60)
    producer.close()
    if failures or left:
        raise RuntimeError(f"the wave was not delivered: {left} messages in flight, {failures[:1]}")
    return sent


def run_stream(
    spark: Any, options: DemoOptions, env: DemoEnv, source: str, target: str, checkpoint: Path, starting: str
) -> list[tuple[int, int]]:
    """One run of the query: drain what is there (``availableNow``) and stop; (batch id, rows) per micro-batch."""
    stream = (
        spark.readStream.format("hybrid-kafka")
        .options(**source_options(env))
        .option("subscribe", source)
        .option("startingOffsets", starting)  # where the first run starts; a restart resumes from the checkpoint
        .load()
    )
    query = (
        stream.select(*transformed(env))
        .writeStream.format("hybrid-kafka")
        .options(**sink_options(options, env))
        .option("topic", target)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        if not query.awaitTermination(180):
            raise TimeoutError("the streaming query did not finish within 180 s")
    finally:
        query.stop()
    return [(int(p.batchId), int(p.numInputRows)) for p in query.recentProgress]


def stream_wave(
    spark: Any,
    options: DemoOptions,
    env: DemoEnv,
    source: str,
    target: str,
    work: Path,
    rows: list[TableRow],
    say: Callable[[str], None],
) -> Check:
    """Two halves of a wave, one run of the query after each (the second a restart); then each message once."""
    wave, sending = wave_plan(options, env)
    middle = len(sending.messages) // 2
    starting = json.dumps({source: {str(p): hi for p, (_, hi) in end_offsets(env, source).items()}})
    sent: dict[bytes, Sent] = {}
    runs: list[tuple[dict[bytes, Sent], list[tuple[int, int]]]] = []
    for number, half in enumerate([sending.messages[:middle], sending.messages[middle:]], 1):
        say(f"stream run {number} of 2, after {len(half)} new messages")
        new = produce_wave(options, env, source, wave, sending, half)
        sent.update(new)
        runs.append((new, run_stream(spark, options, env, source, target, work / "checkpoint", starting)))
    check = read_copy(env, target, "stream", sent)
    check_runs(check, [(new.keys(), batches) for new, batches in runs])
    for number, (new, batches) in enumerate(runs, 1):
        ids = sorted({batch for batch, _ in batches})
        span = f"batch{'es' if len(ids) > 1 else ''} {', '.join(map(str, ids)) or 'none'}"
        label = f"  run {number}{' (restart)' if number > 1 else ''}: {span}"
        size = sum(s.size + TRAILER for s in new.values())
        rows.append(TableRow(label, len(new), size, f"{len(new.keys() & check.passed)}/{len(new)}"))
    return check
