"""The benchmark page says what its broker was: an emulator's caveat never lands on Apache Kafka's run."""

from __future__ import annotations

import pytest

from benchmarks.report import section_caveats


def _caveats(backend: str, kafka: str) -> str:
    return section_caveats({"env": {"kafka": kafka, "kafka_backend": backend, "cpus": 2}})


def test_apache_kafka_run_is_not_called_an_emulation() -> None:
    text = _caveats("kafka", "Apache Kafka 4.1.2")
    assert "**Apache Kafka 4.1.2** is the real broker" in text
    assert "emulation" not in text.split("moto")[0]


@pytest.mark.parametrize("backend", ["tansu", "noida"])
def test_emulators_are_called_emulations(backend: str) -> None:
    assert f"**{backend} 1.0** is an emulation" in _caveats(backend, f"{backend} 1.0")


def test_mock_cluster_is_named_as_such() -> None:
    assert "in-process mock cluster" in _caveats("mock", "librdkafka mock")
