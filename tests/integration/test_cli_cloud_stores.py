"""``gateway gc`` and ``gateway reconcile`` on the GCS and Azure Blob stores, run as an operator runs them.

gc is a real subprocess against fake-gcs-server or Azurite; the Azure connection string (it holds the
account key) comes from ``--command-config``, never the command line, and never shows in the output.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway import HybridProducer, SizeThresholdPolicy
from gateway.testing import KafkaService
from stores import AzureBlobStore, GCSStore
from tests.helpers import payload

ROOT = Path(__file__).resolve().parents[2]
KINDS = ["gcs", "azure"]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "AZURE_STORAGE"))}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**clean, **(env or {})},
    )  # fmt: skip


def send_by_reference(kafka: KafkaService, topic: str, store: Any, value: bytes) -> None:
    """One message whose payload lands in ``store`` and whose envelope lands in ``topic``."""
    policy = SizeThresholdPolicy(reference_above=0, store=store.name)
    with HybridProducer(kafka.producer_config(), policy=policy, stores={store.name: store}) as producer:
        producer.produce(topic, value, key=b"landed")
        assert producer.flush(30) == 0


@pytest.fixture(params=KINDS)
def cloud(request: pytest.FixtureRequest, tmp_path: Path, s3_prefix: str) -> dict[str, Any]:
    """A store of the kind in a fresh bucket or container, and the gc flags that name the same store."""
    config = tmp_path / "client.properties"
    config.touch(mode=0o600)
    if request.param == "gcs":
        server = request.getfixturevalue("gcs_server")
        bucket = request.getfixturevalue("gcs_bucket")
        store = GCSStore(server.client(), bucket=bucket, prefix=s3_prefix, journal_batch=1)
        flags = ["--gcs-bucket", bucket, "--gcs-prefix", s3_prefix, "--gcs-endpoint", server.endpoint_url]
        config.write_text("# nothing secret for the emulator\n")
        return {"store": store, "flags": flags, "config": str(config), "secret": None, "server": server}
    server = request.getfixturevalue("azure_server")
    container = request.getfixturevalue("azure_container")
    store = AzureBlobStore(server.client(), container=container, prefix=s3_prefix, journal_batch=1)
    config.write_text(f"azure.connection.string={server.connection_string}\n")
    key = server.connection_string.split("AccountKey=", 1)[1].split(";", 1)[0]
    flags = ["--azure-container", container, "--azure-prefix", s3_prefix]
    return {"store": store, "flags": flags, "config": str(config), "secret": key, "server": server}


def test_gc_deletes_the_orphan_and_keeps_the_landed_payload(
    kafka: KafkaService, topic: str, cloud: dict[str, Any]
) -> None:
    store = cloud["store"]
    if cloud["server"].external:
        pytest.skip("the flags name the emulator's endpoint")
    send_by_reference(kafka, topic, store, payload(20_000, 1))
    (landed,) = [locator for locator, _ in store.list_locators(topic)]
    orphan = store.put(topic, store.next_message_id(topic, 0), b"never enveloped", pending_since_ms=0)
    store.mark_pending(landed, 0)  # a producer that died between the write and clearing its mark
    base = ["gc", "--bootstrap", kafka.bootstrap_servers, "--grace", "0", "--command-config", cloud["config"]]
    dry = cli(*base, *cloud["flags"])
    assert dry.returncode == 0, dry.stderr
    assert f"would delete: {orphan}" in dry.stdout and f"landed: {landed}" in dry.stdout, dry.stdout
    done = cli(*base, *cloud["flags"], "--delete")
    assert done.returncode == 0, done.stderr
    assert "deleted 1" in done.stdout, done.stdout
    assert sorted(locator for locator, _ in store.list_locators(topic)) == [landed]
    assert store.list_pending(2**62) == [], "the landed payload's mark is cleared, the orphan's gone with it"
    if cloud["secret"]:
        for text in (dry.stdout, dry.stderr, done.stdout, done.stderr):
            assert cloud["secret"] not in text


def test_a_missing_bucket_or_container_is_one_line(cloud: dict[str, Any]) -> None:
    flags = [f if f != cloud["flags"][1] else f"missing-{uuid.uuid4().hex[:8]}" for f in cloud["flags"]]
    out = cli("gc", "--no-verify", "--command-config", cloud["config"], *flags)
    assert out.returncode in (1, 3), out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gateway gc: error: ") and "missing-" in lines[0], out.stderr
    if cloud["secret"]:
        assert cloud["secret"] not in out.stderr + out.stdout


def test_an_azure_container_without_a_connection_string_is_refused_before_any_request() -> None:
    out = cli("gc", "--no-verify", "--azure-container", "c")
    assert out.returncode == 2 and "azure.connection.string" in out.stderr, out.stderr


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_reconcile_finds_and_deletes_the_orphan(
    spark: Any, kafka: KafkaService, topic: str, cloud: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """``gateway reconcile`` through ``main()`` on the session's Spark, the connection string from the file."""
    from gateway.cli import main

    store = cloud["store"]
    send_by_reference(kafka, topic, store, payload(5_000, 2))
    orphan = store.put(topic, uuid.uuid4(), b"nobody points here")
    argv = ["reconcile", "--bootstrap", kafka.bootstrap_servers, "--topic", topic, "--grace", "0", "--delete"]
    assert main([*argv, "--command-config", cloud["config"], *cloud["flags"]]) == 0
    printed = capsys.readouterr()
    assert orphan in printed.out, printed.out
    assert [locator for locator, _ in store.list_locators(topic)] != [] and orphan not in dict(
        store.list_locators(topic)
    )
