"""The benchmark page: what its broker was, and the sections rendered from the side suites' results JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import cloud_clients, compression, report
from benchmarks.clouds import VARIANTS
from benchmarks.report import section_caveats
from benchmarks.variants import CLOUD_CEILING


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


# -- the compression and clouds sections: rendered from their results JSON, never hand-written -----------


def _stat(median: float) -> dict[str, Any]:
    return {"median": median, "min": median * 0.9, "max": median * 1.1, "samples": [median * 0.9, median, median * 1.1]}


def _clouds_results() -> dict[str, Any]:
    env = {"kafka": "Apache Kafka 4.1.2", "redis": "redis 7.0.15", "s3": "moto server 5.2.5", "cpus": 2}
    env |= {"fake_gcs_server": "1.56.1", "azurite": "3.37.0"}
    cell = {
        "size": 1_000_000,
        "label": "1 MB",
        "produce": {v: _stat(100.0) for v in VARIANTS},
        "consume": {v: _stat(200.0) for v in VARIANTS},
        "ratio_stats": {r: {"produce": _stat(0.87), "consume": _stat(1.25)} for r in CLOUD_CEILING},
    }
    routes = {"started": "2026-11-26 21:52 UTC", "wall_seconds": 62.0, "mode": "full", "repeats": 5}
    routes |= {"ceilings": CLOUD_CEILING, "env": env, "sizes": [cell]}
    clients = {
        "started": "2026-11-26 21:52 UTC",
        "sizes": [1_000_000, 50_000_000],
        "repeat": 3,
        "env": {
            "fake_gcs_server": "1.56.1",
            "azurite": "3.37.0",
            "google_cloud_storage": "3.17.1",
            "azure_storage_blob": "12.31.1",
            "cpus": 2,
        },
        "results": {
            "GCS google-cloud-storage": {"put 1 MB": 68.0, "get 1 MB": 345.0, "put 50 MB": 87.0, "get 50 MB": 468.0}
            | {"ranged get 50 MB": 413.0},
            "GCS GCSStore": {"put 1 MB": 155.0, "get 1 MB": 266.0, "put 50 MB": 79.0, "get 50 MB": 342.0}
            | {"ranged get 50 MB": 53.0},
            "Azure azure-storage-blob": {"failed: ServiceRequestError: refused": 0.0},
        },
    }
    return {"kind": "clouds", "routes": routes, "clients": clients}


def test_clouds_section_has_every_route_against_its_ceiling_and_the_clients_table() -> None:
    text = report.section_clouds(_clouds_results())
    assert text.startswith("## GCS and Azure Blob stores beside Redis and S3")
    for route, ceiling in CLOUD_CEILING.items():
        assert (
            f"| `{route}` ÷ `{ceiling}` | 1 MB | 100 (90.0-110) ÷ 100 | 200 (180-220) ÷ 200 | 0.87 (0.78-0.96) |"
            in text
        )
    assert "fake-gcs-server 1.56.1 and Azurite 3.37.0" in text
    assert "| google-cloud-storage (raw) | 68.0 | 345 | 87.0 | 468 (413 in ranges) |" in text
    assert "| `GCSStore` | 155 | 266 | 79.0 | 342 |" in text  # a store's own "ranged" figure is not shown
    assert "failed: ServiceRequestError: refused" in text  # a client that failed is said, not dropped


def test_clouds_section_with_one_part_renders_that_part_only() -> None:
    data = _clouds_results()
    del data["routes"]
    text = report.section_clouds(data)
    assert "### The stores alone against their raw clients" in text and "route ÷ ceiling" not in text
    assert report.section_clouds(None) == "" and report.section_clouds({"kind": "clouds"}) == ""


def test_compression_section_written_by_the_benchmark_and_read_by_the_report(tmp_path: Path) -> None:
    out = tmp_path / "compression.json"
    assert compression.main(["--repeat", "1", "--size-mb", "1", "--no-route"], output=out) == 0
    data = report.load_compression(out)
    assert data is not None
    text = report.section_compression(data)
    assert text.startswith("## Compression: `reference.compression`")
    for kind in ("JSON-like", "random"):
        assert f"| {kind} | none | 1.0000 | n/a | n/a |" in text
        for codec in ("zstd", "lz4", "gzip"):
            assert f"| {kind} | {codec} | " in text
    zstd = next(r for r in data["rows"] if (r["payload"], r["codec"]) == ("JSON-like", "zstd"))
    assert zstd["store_per_payload_byte"] < 0.2  # the compressible payload compresses; the table says by how much
    assert f"| JSON-like | zstd | {zstd['store_per_payload_byte']:.4f} | {zstd['encode_mbps']:.0f} |" in text
    assert report.section_compression(None) == ""
    assert "zstd ÷ none" not in text  # no route runs measured, no route table


def test_compression_section_has_the_routes_with_compression_off_and_on() -> None:
    rows = [
        {"route": route, "payload": kind, "codec": codec, "messages": 3}
        | {"store_per_payload_byte": 0.05 if (kind, codec) == ("JSON-like", "zstd") else 1.0}
        | {"produce": _stat(200.0 if codec == "zstd" else 100.0), "consume": _stat(400.0)}
        for route in ("redis", "s3")
        for kind in ("JSON-like", "random")
        for codec in ("none", "zstd")
    ]
    data = {"kind": "compression", "started": "2026-11-26 22:00 UTC", "size": 10_000_000, "repeat": 5}
    data |= {"env": {"cramjam": "2.14.0", "cpus": 2}, "rows": []}
    data["routes"] = {"size": 10_000_000, "repeat": 5, "env": {"kafka": "Apache Kafka 4.1.2", "redis": "redis 7"}}
    data["routes"]["rows"] = rows
    text = report.section_compression(data)
    assert "on Kafka **Apache Kafka 4.1.2**" in text and "20x fewer bytes" in text
    assert "| s3 | JSON-like | zstd | 0.0500 | 200 (180-220) | 400 (360-440) | 2.00 | 1.00 |" in text
    assert "| redis | random | none | 1.0000 | 100 (90.0-110) | 400 (360-440) |  |  |" in text


def test_clouds_parts_are_written_apart_and_kept_together(tmp_path: Path) -> None:
    out = tmp_path / "clouds.json"
    whole = _clouds_results()
    cloud_clients.save_part("clients", whole["clients"], out)
    cloud_clients.save_part("routes", whole["routes"], out)
    cloud_clients.save_part("clients", {**whole["clients"], "repeat": 1}, out)  # a rerun of one part
    data = report.load_clouds(out)
    assert data is not None and data["routes"] == whole["routes"] and data["clients"]["repeat"] == 1


def test_emulator_versions_are_read_from_what_was_built(tmp_path: Path) -> None:
    binary = tmp_path / "fake-gcs-server"
    binary.write_bytes(
        b"\x00ELF...path\tgithub.com/fsouza/fake-gcs-server\nmod\tgithub.com/fsouza/fake-gcs-server\tv1.56.1\th1:x"
    )
    assert cloud_clients.fake_gcs_version(binary) == "1.56.1"
    assert cloud_clients.fake_gcs_version(tmp_path / "missing") == "unknown"
    script = tmp_path / "azurite" / "dist" / "src" / "blob" / "main.js"
    script.parent.mkdir(parents=True)
    script.write_text("")
    (tmp_path / "azurite" / "package.json").write_text(json.dumps({"name": "azurite", "version": "3.37.0"}))
    assert cloud_clients.azurite_version(script) == "3.37.0"


@pytest.mark.parametrize("present", [True, False])
def test_page_has_the_sections_exactly_when_their_results_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, present: bool
) -> None:
    """The regression: the page lost both sections on every regeneration, since no JSON held them."""
    clouds_json, compression_json = tmp_path / "clouds.json", tmp_path / "compression.json"
    if present:
        clouds_json.write_text(json.dumps(_clouds_results()))
        assert compression.main(["--repeat", "1", "--size-mb", "1", "--no-route"], output=compression_json) == 0
    monkeypatch.setattr(report, "CLOUDS_RESULTS", clouds_json)
    monkeypatch.setattr(report, "COMPRESSION_RESULTS", compression_json)
    routes = json.loads(report.newest_results().read_text())  # the committed routes run the page is made of
    routes.setdefault("name", "routes")
    images = {name: tmp_path / f"{name}.png" for name in ("throughput", "ratio", "latency", "mixes")}
    page = report.render(routes, images, tmp_path / "benchmarks.md")
    headings = [line for line in page.splitlines() if line.startswith("## ")]
    clouds_heading = "## GCS and Azure Blob stores beside Redis and S3"
    compression_heading = "## Compression: `reference.compression`"
    if present:
        at = headings.index("## Targets")  # after the table and the plots, which open the page
        assert headings[at + 1 : at + 4] == [clouds_heading, compression_heading, "## Consumer memory"]
    else:
        assert clouds_heading not in headings and compression_heading not in headings


def test_a_profiled_function_the_tree_no_longer_has_is_marked(tmp_path: Path) -> None:
    """The profile tables quote the code the run measured; a name renamed or moved since is marked, not hidden."""
    (tmp_path / "gateway").mkdir()
    (tmp_path / "gateway" / "mod.py").write_text("class Kept:\n    def feed(self) -> None: ...\n")
    assert report._function_cell("gateway/mod.py:2(feed)", tmp_path) == "`gateway/mod.py:2(feed)`"
    assert report._function_cell("gateway/mod.py:1(Kept)", tmp_path) == "`gateway/mod.py:1(Kept)`"
    assert report._function_cell("gateway/mod.py:9(_produce_routed)", tmp_path).endswith("(since renamed or moved)")
    assert report._function_cell("gateway/gone.py:9(feed)", tmp_path).endswith("(since renamed or moved)")
    assert report._function_cell("<method 'poll' of 'cimpl.Consumer' objects>", tmp_path) == (
        "`<method 'poll' of 'cimpl.Consumer' objects>`"
    )
