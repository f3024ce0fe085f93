"""Which client library the GCS and Azure stores use: the official SDKs against obstore, on the emulators.

Run ``python -m benchmarks.cloud_clients`` (after ``make emulators``): it starts fake-gcs-server and
Azurite, and for each client times a PUT and a GET of 1 MB and 50 MB and a GET of 50 MB as parallel
8 MiB ranges, best of ``--repeat``; figures in MB/s. docs/stores.md records the outcome.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import stores
from gateway.testing.cloud_emulators import AZURITE_ACCOUNT, AZURITE_KEY, AzuriteServer, GCSServer

MB = 1_000_000
PART = 8 * 1024 * 1024


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
        self.locators: dict[str, str] = {}

    def put(self, key: str, data: bytes) -> None:
        self.locators[key] = self.store.put("bench", uuid.uuid4(), data)

    def get(self, key: str) -> bytes:
        return bytes(self.store.get(self.locators[key], None))

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes-mb", default="1,50")
    args = parser.parse_args()
    sizes = [int(s) * MB for s in args.sizes_mb.split(",")]
    from obstore.store import AzureStore, GCSStore

    results: dict[str, dict[str, float]] = {}
    with GCSServer(from_env=False) as gcs:
        bucket = gcs.create_bucket(f"bench-{uuid.uuid4().hex[:8]}")
        ob_gcs = GCSStore(
            bucket,
            base_url=gcs.endpoint_url,
            credential_provider=lambda: {"token": "emulator", "expires_at": None},  # type: ignore[arg-type]  # never the metadata server
            client_options={"allow_http": True},
        )
        gcs_route = StoreRoute(stores.GCSStore(gcs.client(), bucket=bucket, journal_batch=1))
        for client in (GoogleSDK(gcs, bucket), Obstore(ob_gcs, "obstore (GCS)"), gcs_route):
            try:
                results[f"GCS {client.name}"] = measure(client, sizes, args.repeat)
            except Exception as exc:  # noqa: BLE001 - a client that cannot talk to the emulator is a result too
                results[f"GCS {client.name}"] = {f"failed: {type(exc).__name__}: {str(exc)[:160]}": 0.0}
    with AzuriteServer(from_env=False) as azurite:
        container = azurite.create_container(f"bench-{uuid.uuid4().hex[:8]}")
        ob_az = AzureStore(
            container,
            account_name=AZURITE_ACCOUNT,
            account_key=AZURITE_KEY,
            endpoint=azurite.endpoint_url,
            client_options={"allow_http": True},
        )
        az_route = StoreRoute(stores.AzureBlobStore(azurite.client(), container=container, journal_batch=1))
        for client in (AzureSDK(azurite, container), Obstore(ob_az, "obstore (Azure)"), az_route):  # type: ignore[assignment]
            try:
                results[f"Azure {client.name}"] = measure(client, sizes, args.repeat)
            except Exception as exc:  # noqa: BLE001
                results[f"Azure {client.name}"] = {f"failed: {type(exc).__name__}: {str(exc)[:160]}": 0.0}
    for who, figures in results.items():
        print(f"{who}: " + ", ".join(f"{k} {v:.0f} MB/s" for k, v in figures.items()))


if __name__ == "__main__":
    main()
