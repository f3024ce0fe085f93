"""``gateway demo``: the main job, end to end on real local components.

It produces a realistic mix (log-normal sizes, a few percent large) through
:class:`HybridProducer` under :class:`SizeThresholdPolicy`, consumes it back with
:class:`HybridConsumer`, checks every byte by SHA-256 and prints what went where
(:mod:`gateway.testing.demo._routes`). Then, when PySpark and Java are there, the Spark stage
(:mod:`gateway.testing.demo._spark`) reads the same topic through ``hybrid-kafka``, writes a copy
through the sink and runs a stream with a restart.
"""

from __future__ import annotations

import uuid
from contextlib import ExitStack

from gateway.command import probe_kafka
from gateway.testing.demo._env import DemoEnv, open_stores
from gateway.testing.demo._model import DemoOptions, DemoResult, RouteStats, Sent
from gateway.testing.demo._report import Stage, render
from gateway.testing.demo._routes import (
    MOCK_MAX_PARTITIONS,
    MOCK_PARTITION_BYTES,
    MOCK_WINDOW,
    PARTITIONS,
    Plan,
    TieredPolicy,
    demo_consumer,
    demo_policy,
    demo_producer,
    pattern_bytes,
    payload_for,
    plan,
    run_demo,
    sizes,
    spread,
)


def main(options: DemoOptions) -> int:
    """Start what the demo needs, run its stages, print the report; exit status 0 only if every stage verified."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn
    from rich.text import Text

    from gateway import testing

    kafka: testing.KafkaService
    console = Console(width=max(120, Console().width))
    with ExitStack() as stack:
        if ":" in options.kafka:  # a bootstrap address: an existing cluster, which must answer first
            probe_kafka(options.kafka)
            kafka = stack.enter_context(testing.ExternalKafka(bootstrap_servers=options.kafka))
            backend = f"external {options.kafka}"
        else:
            kafka = stack.enter_context(testing.start_kafka(options.kafka))
            backend = f"{kafka.name} ({kafka.version})"
        window = MOCK_WINDOW if kafka.name == "mock" else None
        stores, store_options, store_notes = open_stores(options, stack)
        env = DemoEnv(kafka, backend, stores, store_options, window)
        for note in store_notes:
            console.print(Text("note: ", style="yellow") + Text(note), soft_wrap=True)
        topic = f"gateway-demo-{uuid.uuid4().hex[:8]}"
        sending = plan(options, window, demo_policy(options, stores)[1])
        env.partitions = sending.partitions
        env.create_topic(topic, sending.partitions)
        line = f"Kafka: {backend}; topic {topic}, {env.partitions or 'auto-created'} partitions"
        if sending.placement:
            line += f", each below {MOCK_PARTITION_BYTES:,} bytes"
        if window is not None:
            line += f"; at most {window:,} bytes left unconsumed (the embedded cluster keeps ~5 MiB per partition)"
        console.print(Text(line), soft_wrap=True)
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task("producing and verifying", total=len(sending.messages))
            result = run_demo(
                options, env, topic, sending, progress=lambda done, total: bar.update(task, completed=done, total=total)
            )
        stages: list[Stage] = []
        if options.spark:
            from gateway.testing.demo._spark import spark_stage

            stage = spark_stage(options, env, result, console)
            if stage is not None:
                stages.append(stage)
        return 0 if render(result, console, stages) else 1


__all__ = [
    "MOCK_MAX_PARTITIONS",
    "MOCK_PARTITION_BYTES",
    "MOCK_WINDOW",
    "PARTITIONS",
    "DemoOptions",
    "DemoResult",
    "Plan",
    "RouteStats",
    "Sent",
    "TieredPolicy",
    "demo_consumer",
    "demo_policy",
    "demo_producer",
    "main",
    "pattern_bytes",
    "payload_for",
    "plan",
    "run_demo",
    "sizes",
    "spread",
]
