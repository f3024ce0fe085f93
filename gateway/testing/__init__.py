"""Real servers on loopback for tests, ``gateway demo`` and benchmarks: Apache Kafka, the emulators,
redis-server (alone or as a Redis Cluster), moto's S3 server, fake-gcs-server, Azurite and a Spark
standalone cluster, each started on free ports and stopped again by its PID.

Nothing in the library imports this package: it is tooling, installed with the ``[testing]`` extra.
Each service can instead point at something that already runs, through environment variables, so
the same suite can be aimed at a real cluster: ``KAFKA_TEST_BACKEND`` / ``KAFKA_BOOTSTRAP_SERVERS``
(+ ``KAFKA_CLIENT_CONFIG``), ``REDIS_URL``, ``S3_ENDPOINT_URL`` (+ ``AWS_*``, ``S3_BUCKET``),
``GCS_ENDPOINT_URL`` (+ ``GCS_BUCKET``), ``AZURE_STORAGE_CONNECTION_STRING`` (+ ``AZURE_CONTAINER``);
``SPARK_KAFKA_LIB_DIR`` for Spark's own Kafka source.
"""

from gateway.testing.apache_kafka import ApacheKafka, ApacheKafkaCluster, KafkaNode, ScramTls, kafka_lib_dir
from gateway.testing.backends import ExternalKafka, MockKafka, NoidaKafka, TansuKafka, start_kafka
from gateway.testing.cloud_emulators import AzuriteServer, GCSServer
from gateway.testing.kafka_service import (
    BACKEND_CAPABILITIES,
    BACKENDS,
    CAPABILITIES,
    KafkaService,
    backend_capabilities,
    resolve_backend,
)
from gateway.testing.memory_store import MemoryStore
from gateway.testing.processes import LOOPBACK, ServiceStartError, ServiceUnavailable, free_port
from gateway.testing.redis_cluster import RedisClusterServer
from gateway.testing.redis_server import RedisServer
from gateway.testing.s3_server import S3Server
from gateway.testing.spark_cluster import SparkStandaloneCluster, SparkWorker
from gateway.testing.spark_jars import spark_kafka_conf, spark_kafka_jars, spark_kafka_lib_dir

__all__ = [
    "BACKENDS",
    "BACKEND_CAPABILITIES",
    "CAPABILITIES",
    "LOOPBACK",
    "ApacheKafka",
    "ApacheKafkaCluster",
    "AzuriteServer",
    "ExternalKafka",
    "GCSServer",
    "KafkaNode",
    "KafkaService",
    "MemoryStore",
    "MockKafka",
    "NoidaKafka",
    "RedisClusterServer",
    "RedisServer",
    "S3Server",
    "ScramTls",
    "ServiceStartError",
    "ServiceUnavailable",
    "SparkStandaloneCluster",
    "SparkWorker",
    "TansuKafka",
    "backend_capabilities",
    "free_port",
    "kafka_lib_dir",
    "resolve_backend",
    "spark_kafka_conf",
    "spark_kafka_jars",
    "spark_kafka_lib_dir",
    "start_kafka",
]
