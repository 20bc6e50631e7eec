"""Local object stores for the remote tests: moto's S3 and a GCS emulator, behind proxies.

Each server starts once per session on a free localhost port, with a ``FaultProxy``
(``fault_proxy.py``) in front that tests configure to add latency or inject failures.
The credentials and endpoint variables are set only inside the tests that ask for a
store (``monkeypatch``), and no test reaches the internet.
"""

from __future__ import annotations

import itertools
import logging
import socket
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fault_proxy import FaultProxy

_buckets = itertools.count()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Store:
    """One fresh bucket, how to put objects in it behind the proxy's back, and the proxy."""

    def __init__(self, scheme: str, bucket: str, proxy: FaultProxy, client: Any) -> None:
        self.scheme, self.bucket, self.proxy, self._client = scheme, bucket, proxy, client

    def url(self, key: str) -> str:
        return f"{self.scheme}://{self.bucket}/{key}"

    def put(self, key: str, data: bytes) -> str:
        if self.scheme == "s3":
            self._client.put_object(Bucket=self.bucket, Key=key, Body=data)
        else:
            endpoint = self._client._endpoint  # the emulator itself, not the proxy
            name = urllib.parse.quote(key, safe="")
            request = urllib.request.Request(
                f"{endpoint}/upload/storage/v1/b/{self.bucket}/o?uploadType=media&name={name}",
                data=data,
                method="POST",
            )
            with urllib.request.urlopen(request) as reply:
                reply.read()
        return self.url(key)

    def obstore_store(self, **options: Any) -> Any:
        """An obstore ``S3Store`` of this bucket, holding the proxy's address and the test
        credentials itself (``options`` go to ``S3Store``)."""
        from obstore.store import S3Store

        config = {"endpoint": self.proxy.url, "region": "us-east-1", "access_key_id": "test",
                  "secret_access_key": "test"}  # fmt: skip
        return S3Store(self.bucket, config=config, client_options={"allow_http": True}, **options)

    def exists(self, key: str) -> bool:
        if self.scheme == "s3":
            found = self._client.list_objects_v2(Bucket=self.bucket, Prefix=key)
            return any(item["Key"] == key for item in found.get("Contents", []))
        return bool(self._client.exists(f"{self.bucket}/{key}"))

    def keys(self) -> list[str]:
        if self.scheme == "s3":
            found = self._client.list_objects_v2(Bucket=self.bucket)
            return sorted(item["Key"] for item in found.get("Contents", []))
        return sorted(p.split("/", 1)[1] for p in self._client.find(self.bucket))


@pytest.fixture(scope="session")
def _s3_server() -> Iterator[tuple[FaultProxy, Any]]:
    pytest.importorskip("obstore")
    server_module = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = server_module.ThreadedMotoServer("127.0.0.1", 0, verbose=False)
    server.start()
    port = server.get_host_and_port()[1]
    proxy = FaultProxy(port)
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    try:
        yield proxy, client
    finally:
        proxy.close()
        server.stop()


@pytest.fixture
def s3(_s3_server: tuple[FaultProxy, Any], monkeypatch: pytest.MonkeyPatch) -> Store:
    """A fresh S3 bucket; ``AWS_*`` point obstore at moto through the proxy."""
    proxy, client = _s3_server
    proxy.configure()
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    bucket = f"chute-test-{next(_buckets)}"
    client.create_bucket(Bucket=bucket)
    return Store("s3", bucket, proxy, client)


@pytest.fixture(scope="session")
def _gcs_server() -> Iterator[tuple[FaultProxy, int]]:
    emulator = pytest.importorskip("gcp_storage_emulator.server")
    pytest.importorskip("gcsfs")
    logging.getLogger("gcp_storage_emulator").setLevel(logging.CRITICAL)
    port = _free_port()
    server = emulator.create_server("127.0.0.1", port, in_memory=True)
    server.start()
    proxy = FaultProxy(port)
    try:
        yield proxy, port
    finally:
        proxy.close()
        server.stop()


@pytest.fixture
def gcs(_gcs_server: tuple[FaultProxy, int], monkeypatch: pytest.MonkeyPatch) -> Store:
    """A fresh GCS bucket on the emulator; ``STORAGE_EMULATOR_HOST`` is the proxy."""
    from gcsfs.core import GCSFileSystem

    proxy, port = _gcs_server
    proxy.configure()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    direct = GCSFileSystem(
        token="anon", endpoint_url=f"http://127.0.0.1:{port}", skip_instance_cache=True
    )
    bucket = f"chute-test-{next(_buckets)}"
    direct.mkdir(bucket)
    return Store("gs", bucket, proxy, direct)


class SilentServer:
    """Accepts connections and reads requests, and never answers: a store gone silent."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._requests = threading.Semaphore(0)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}"

    def wait_for_requests(self, count: int) -> None:
        """Returns once ``count`` requests (their first bytes) have arrived."""
        for _ in range(count):
            assert self._requests.acquire(timeout=60), "the requests never came"

    def close(self) -> None:
        self._socket.close()
        with self._lock:
            for conn in self._held:
                conn.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:  # closed
                return
            with self._lock:
                self._held.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            for _ in range(data.count(b"HTTP/1.1\r\n")):  # a request line each
                self._requests.release()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    """A server that takes connections and requests and never answers."""
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()
