"""What a user installs: the library alone needs confluent-kafka; tooling and stores' clients are extras."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_WITHOUT_EXTRAS = """
import sys
for name in ("redis", "boto3", "botocore", "rich", "pyspark", "prometheus_client", "moto", "pyarrow", "pandas",
             "matplotlib", "hypothesis", "pytest", "google", "azure"):
    sys.modules[name] = None  # importing any of them now fails, as if it were not installed
import gateway, gateway.cli, gateway.protocol, stores
from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
assert not any(m == "gateway.testing" or m.startswith("gateway.testing.") for m in sys.modules), "testing imported"
assert "benchmarks" not in sys.modules
from gateway.embedded import EmbeddedKafka  # the documented import: test tooling, and it needs nothing more either
for name, extra in (("RedisStore", "redis"), ("S3Store", "s3"), ("GCSStore", "gcs"), ("AzureBlobStore", "azure")):
    try:
        getattr(stores, name)
    except ImportError as exc:
        assert f"kafka-hybrid-gateway[{extra}]" in str(exc), exc
    else:
        raise AssertionError(f"{name} imported without its client package")
print("ok")
"""


def test_import_gateway_needs_only_confluent_kafka() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_wheel_ships_the_library_but_not_the_benchmarks(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("kafka_hybrid_gateway-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if "/" in n and ".dist-info" not in n}
    assert tops == {"gateway", "stores"}, tops
    assert "gateway/py.typed" in names and "stores/py.typed" in names
    assert not any(n.startswith("benchmarks/") for n in names)
