"""The GCS and Azure stores against their raw clients (the official SDKs), on the emulators.

Run ``python -m benchmarks.cloud_clients`` (after ``make emulators``; ``gateway bench --suite clouds`` runs it
too): it starts fake-gcs-server and Azurite, and for each client times a PUT and a GET of 1 MB and 50 MB and
a GET of 50 MB as parallel 8 MiB ranges, best of ``--repeat``; figures in MB/s. The results go to the
``clients`` part of ``benchmarks/results/clouds.json``, rendered in docs/benchmarks.md. ``--obstore`` adds
obstore, the client that was measured against the SDKs to choose them (docs/stores.md records the outcome).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import stores
from benchmarks.common import RESULTS
from gateway.testing.cloud_emulators import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    AzuriteServer,
    GCSServer,
    azurite_script,
    gcs_emulator_binary,
)

MB = 1_000_000
PART = 8 * 1024 * 1024
OUTPUT = RESULTS / "clouds.json"


def fake_gcs_version(binary: Path | None = None) -> str:
    """The module version Go embedded in the binary (``go version -m`` reads the same), or "unknown"."""
    try:
        found = re.search(
            rb"mod\tgithub.com/fsouza/fake-gcs-server\t(v[0-9][^\t\n]*)", (binary or gcs_emulator_binary()).read_bytes()
        )
    except OSError:
        return "unknown"
    return found.group(1).decode().lstrip("v") if found else "unknown"


def azurite_version(script: Path | None = None) -> str:
    """Azurite's package.json version (the script is ``<package>/dist/src/blob/main.js``), or "unknown"."""
    try:
        package = (script or azurite_script()).parents[3] / "package.json"
        return str(json.loads(package.read_text())["version"])
    except (OSError, IndexError, KeyError, ValueError):
        return "unknown"


def emulator_env() -> dict[str, Any]:
    """What the figures were measured on: the emulators' and SDKs' versions, the machine's CPUs."""
    return {
        "fake_gcs_server": fake_gcs_version(),
        "azurite": azurite_version(),
        "google_cloud_storage": importlib.metadata.version("google-cloud-storage"),
        "azure_storage_blob": importlib.metadata.version("azure-storage-blob"),
        "cpus": os.cpu_count(),
    }


def save_part(part: str, data: dict[str, Any], output: Path = OUTPUT) -> Path:
    """Write one part (``clients`` or ``routes``) of clouds.json, keeping the other part as it was."""
    whole: dict[str, Any] = {"kind": "clouds"}
    if output.exists():
        try:
            previous = json.loads(output.read_text())
        except ValueError:
            previous = {}
        if isinstance(previous, dict) and previous.get("kind") == "clouds":
            whole = previous
    whole[part] = data
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(whole, indent=2) + "\n")
    tmp.replace(output)
    return output


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def ranges(size: int) -> list[tuple[int, int]]:
    return [(start, min(size, start + PART)) for start in range(0, size, PART)]


class Client:
    """put / get / get_range on one bucket or container."""

    name = ""

    def put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def get(self, key: str) -> bytes:
        raise NotImplementedError

    def get_range(self, key: str, start: int, end: int) -> bytes:
        raise NotImplementedError


class GoogleSDK(Client):
    name = "google-cloud-storage"

    def __init__(self, server: GCSServer, bucket: str) -> None:
        self.bucket = server.client().bucket(bucket)

    def put(self, key: str, data: bytes) -> None:
        self.bucket.blob(key, chunk_size=PART if len(data) > PART else None).upload_from_string(data)

    def get(self, key: str) -> bytes:
        return bytes(self.bucket.blob(key).download_as_bytes())

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return bytes(self.bucket.blob(key).download_as_bytes(start=start, end=end - 1))


class AzureSDK(Client):
    name = "azure-storage-blob"

    def __init__(self, server: AzuriteServer, container: str) -> None:
        self.container = server.client().get_container_client(container)

    def put(self, key: str, data: bytes) -> None:
        self.container.upload_blob(key, data, overwrite=True, max_concurrency=4)

    def get(self, key: str) -> bytes:
        return bytes(self.container.download_blob(key).readall())

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return bytes(self.container.download_blob(key, offset=start, length=end - start).readall())


def _emulator_token() -> dict[str, Any]:
    """obstore's GCS credentials for fake-gcs-server, which checks none."""
    return {"token": "emulator", "expires_at": None}


class Obstore(Client):
    def __init__(self, store: Any, name: str) -> None:
        self.store, self.name = store, name

    def put(self, key: str, data: bytes) -> None:
        import obstore

        obstore.put(self.store, key, data, chunk_size=PART, max_concurrency=4)

    def get(self, key: str) -> bytes:
        import obstore

        return bytes(obstore.get(self.store, key).bytes())

    def get_range(self, key: str, start: int, end: int) -> bytes:
        import obstore

        return bytes(obstore.get_range(self.store, key, start=start, end=end))


class StoreRoute(Client):
    """The store itself (GCSStore, AzureBlobStore): what a reference message's write and read cost on top."""

    def __init__(self, store: Any) -> None:
        self.store, self.name = store, type(store).__name__
        self.locators: dict[str, tuple[str, int]] = {}

    def put(self, key: str, data: bytes) -> None:
        self.locators[key] = (self.store.put("bench", uuid.uuid4(), data), len(data))

    def get(self, key: str) -> bytes:
        locator, size = self.locators[key]
        return bytes(self.store.get(locator, size))  # the size an envelope carries: one ranged GET, no HEAD

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.get(key)[start:end]


def measure(client: Client, sizes: list[int], repeat: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with ThreadPoolExecutor(4) as pool:
        for size in sizes:
            out.update(measure_size(client, pool, size, repeat))
    return out


def measure_size(client: Client, pool: ThreadPoolExecutor, size: int, repeat: int) -> dict[str, float]:
    data = os.urandom(size)
    key = f"bench/{uuid.uuid4()}"
    out = {
        f"put {size // MB} MB": size / MB / best(lambda: client.put(key, data), repeat),
        f"get {size // MB} MB": size / MB / best(lambda: client.get(key), repeat),
    }
    if size > PART:

        def parallel() -> None:
            parts = list(pool.map(lambda r: client.get_range(key, *r), ranges(size)))
            assert sum(map(len, parts)) == size

        out[f"ranged get {size // MB} MB"] = size / MB / best(parallel, repeat)
    return out


def measure_all(sizes: list[int], repeat: int, with_obstore: bool) -> dict[str, dict[str, float]]:
    """``"<cloud> <client>" -> {"put 1 MB": MB/s, ...}``; a client that fails is recorded with its error."""
    results: dict[str, dict[str, float]] = {}

    def run(cloud: str, clients: list[Client]) -> None:
        for client in clients:
            try:
                results[f"{cloud} {client.name}"] = measure(client, sizes, repeat)
            except Exception as exc:  # noqa: BLE001 - a client that cannot talk to the emulator is a result too
                results[f"{cloud} {client.name}"] = {f"failed: {type(exc).__name__}: {str(exc)[:160]}": 0.0}

    with GCSServer(from_env=False) as gcs:
        bucket = gcs.create_bucket(f"bench-{uuid.uuid4().hex[:8]}")
        gcs_clients: list[Client] = [GoogleSDK(gcs, bucket)]
        if with_obstore:
            from obstore.store import GCSStore

            token: Any = _emulator_token  # never the metadata server
            ob_gcs = GCSStore(
                bucket, base_url=gcs.endpoint_url, credential_provider=token, client_options={"allow_http": True}
            )
            gcs_clients.append(Obstore(ob_gcs, "obstore (GCS)"))
        gcs_clients.append(StoreRoute(stores.GCSStore(gcs.client(), bucket=bucket, journal_batch=1)))
        run("GCS", gcs_clients)
    with AzuriteServer(from_env=False) as azurite:
        container = azurite.create_container(f"bench-{uuid.uuid4().hex[:8]}")
        az_clients: list[Client] = [AzureSDK(azurite, container)]
        if with_obstore:
            from obstore.store import AzureStore

            ob_az = AzureStore(
                container,
                account_name=AZURITE_ACCOUNT,
                account_key=AZURITE_KEY,
                endpoint=azurite.endpoint_url,
                client_options={"allow_http": True},
            )
            az_clients.append(Obstore(ob_az, "obstore (Azure)"))
        az_clients.append(StoreRoute(stores.AzureBlobStore(azurite.client(), container=container, journal_batch=1)))
        run("Azure", az_clients)
    return results


def main(argv: list[str] | None = None, output: Path = OUTPUT) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cloud_clients", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes-mb", default="1,50")
    parser.add_argument("--obstore", action="store_true", help="measure obstore too (the client not chosen)")
    args = parser.parse_args(argv)
    sizes = [int(s) * MB for s in args.sizes_mb.split(",")]
    started, clock = datetime.now(timezone.utc), time.perf_counter()
    results = measure_all(sizes, args.repeat, args.obstore)
    for who, figures in results.items():
        print(f"{who}: " + ", ".join(f"{k} {v:.0f} MB/s" for k, v in figures.items()))
    part = {
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "wall_seconds": time.perf_counter() - clock,
        "sizes": sizes,
        "repeat": args.repeat,
        "part_bytes": PART,
        "env": emulator_env(),
        "results": results,
    }
    print(f"written {save_part('clients', part, output)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
