"""Consumer and producer memory, measured in a child process so that nothing the timed runs allocated is counted.

The parent (:mod:`benchmarks.suite`) hands over, on stdin, where the servers are, the payload sizes
of the cell and which topics (and store keys) each variant wrote; the child puts glibc in its
"lean" mode (see :mod:`benchmarks.common`), then for each repetition and each variant creates that
variant's consumer, reads the whole cell and records the peak RSS growth of the read. It prints
``{"variant": [bytes, ...]}`` as JSON on stdout.

    python -m benchmarks.memory < spec.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from benchmarks.common import ROOT, PeakMemory, malloc_mode, payload
from benchmarks.variants import Services, Work, consume_job, produce_job
from gateway.testing import KafkaService, RedisServer, S3Server


class _Attached(KafkaService):
    """The parent's broker, reached by address; this process starts and stops nothing."""

    name = "external"


def spec_for(
    svc: Services, sizes: dict[str, list[int]], passes: dict[str, str], repeats: int, side: str = "consume"
) -> dict[str, Any]:
    """``sizes``: per variant, the payload sizes it wrote (payload ``i`` is ``payload(size, seed=i)``).

    ``side`` "consume" reads each variant's topic in ``passes``; "produce" writes the payloads to it.
    """
    kafka = svc.kafka
    return {
        "bootstrap": kafka.bootstrap_servers,
        "client_config": kafka.client_config,
        "consumer_defaults": kafka.consumer_defaults,
        "redis_url": svc.redis_server.url,
        "s3_endpoint": svc.s3_server.endpoint_url,
        "s3_external": svc.s3_server.external,
        "bucket": svc.bucket,
        "redis_prefix": svc.redis_prefix,
        "s3_prefix": svc.s3_prefix,
        "sizes": sizes,
        "passes": passes,
        "repeats": repeats,
        "side": side,
    }


def measure_in_child(spec: dict[str, Any], timeout: float = 900.0) -> dict[str, list[float]]:
    """Run this module in a fresh interpreter that sees the same modules as this one."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    if not spec["s3_external"]:  # the local moto server takes any key; never send real credentials to it
        env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory"],
        input=json.dumps(spec),
        text=True,
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memory pass failed ({done.returncode}):\n{done.stderr[-3000:]}")
    out: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def main() -> int:
    spec = json.load(sys.stdin)
    malloc_mode("lean")
    kafka = _Attached(version="attached", bootstrap_servers=spec["bootstrap"], client_config=spec["client_config"])
    kafka.consumer_defaults = dict(spec["consumer_defaults"])
    redis_server = RedisServer(spec["redis_url"], from_env=False)
    s3_server = S3Server(spec["s3_endpoint"], from_env=False) if spec["s3_endpoint"] else S3Server(from_env=True)
    svc = Services(
        kafka, redis_server, s3_server, spec["bucket"], redis_prefix=spec["redis_prefix"], s3_prefix=spec["s3_prefix"]
    )
    passes: dict[str, str] = spec["passes"]
    works: dict[tuple[int, ...], Work] = {}
    for variant in passes:
        shape = tuple(spec["sizes"][variant])
        if shape not in works:
            works[shape] = Work.of("memory", [payload(size, seed=i) for i, size in enumerate(shape)])
    producing = spec.get("side") == "produce"
    growth: dict[str, list[float]] = {v: [] for v in passes}
    for rep in range(int(spec["repeats"])):
        order = list(passes) if rep % 2 == 0 else list(passes)[::-1]
        for variant in order:
            work = works[tuple(spec["sizes"][variant])]
            topic = passes[variant]
            job = produce_job(svc, variant, topic, work) if producing else consume_job(svc, variant, topic, work)
            try:
                with PeakMemory() as mem:
                    job.run()
            finally:
                job.close()
            growth[variant].append(mem.growth)
    print(json.dumps(growth))
    return 0


if __name__ == "__main__":
    sys.exit(main())
