"""What both stages of ``gateway demo`` run against: the Kafka cluster, the stores, and how Spark's
executors reach the same stores (as ``hybrid-kafka`` options, since store objects never travel)."""

from __future__ import annotations

import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.testing import KafkaService
    from gateway.testing.demo._model import DemoOptions


@dataclass
class DemoEnv:
    """What both stages use: Kafka, the stores, and how Spark's executors reach the same stores."""

    kafka: KafkaService
    backend: str
    stores: dict[str, Any]
    store_options: dict[str, str] | None
    """The stores as ``hybrid-kafka`` options; None when one is an in-process stand-in no executor can reach."""
    window: int | None
    partitions: int | None = None
    """Partitions of the demo's topics, when the demo created them (None: the broker auto-created them)."""

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap_servers

    def create_topic(self, name: str, partitions: int) -> None:
        """Create ``name`` with ``partitions``, or leave it to auto-creation on a cluster that refuses."""
        from confluent_kafka import KafkaException

        try:
            self.kafka.create_topic(name, partitions)
        except (KafkaException, TimeoutError):
            if self.kafka.name != "external":
                raise
            self.partitions = None  # not ours to create: the copies then leave the partition to Kafka


def open_stores(options: DemoOptions, stack: ExitStack) -> tuple[dict[str, Any], dict[str, str] | None, list[str]]:
    """Real Redis and S3 servers when installed; in-process stand-ins otherwise, and the screen says which.

    Also the same stores as ``hybrid-kafka`` options, for Spark's executors (None with a stand-in).
    """
    from gateway import store_registry, testing

    stores: dict[str, Any] = {}
    spark: dict[str, str] = {}
    reachable = True  # an in-process stand-in is out of the executors' reach
    notes: list[str] = []
    if "redis" in options.stores:
        try:
            import redis

            server = stack.enter_context(testing.RedisServer())
            client = redis.Redis.from_url(server.url, socket_timeout=5, socket_connect_timeout=2)
            stores["redis"] = store_registry.redis_store(client, prefix=f"demo{uuid.uuid4().hex[:6]}")
            spark.update({"redis.url": server.url, "redis.prefix": stores["redis"].prefix})
            notes.append(f"Redis: redis-server {server.server_version()} at {server.url}")
        except (testing.ServiceUnavailable, ImportError) as exc:
            try:
                import fakeredis

                stores["redis"] = store_registry.redis_store(fakeredis.FakeRedis(), prefix="demo")
                reachable = False
                notes.append(f"Redis: in-process fakeredis stand-in ({exc})")
            except ImportError:
                notes.append(f"Redis: not available ({exc}); no Redis references")
    if "s3" in options.stores:
        try:
            s3 = stack.enter_context(testing.S3Server())
            bucket = s3.create_bucket(f"gateway-demo-{uuid.uuid4().hex[:8]}")
            stores["s3"] = store_registry.s3_store(s3.client(), bucket=bucket, prefix="demo/")
            spark.update({"s3.bucket": bucket, "s3.prefix": "demo/", "s3.region": s3.region})
            spark.update({"s3.endpoint": s3.endpoint_url} if s3.endpoint_url else {})
            spark.update({} if s3.external else {"s3.access.key": "testing", "s3.secret.key": "testing"})
            notes.append(f"S3: moto server at {s3.endpoint_url}, bucket {bucket}")
        except (testing.ServiceUnavailable, ImportError) as exc:
            notes.append(f"S3: not available ({exc}); no S3 references")
    if not stores:
        notes.append("no store available: large messages are chunked, or left out when they exceed the window")
    return stores, spark if reachable else None, notes
