"""Which client should chute's object-store transport use: obstore or fsspec (s3fs)?

Runs moto's S3 server and the fault-injecting test proxy (tests/remote/fault_proxy.py),
each in its own process, with 20 ms added to every request, uploads a 4 MiB object, and
times 200 ranged GETs of 1 KiB and of 64 KiB, issued concurrently, with each client's own
way of doing so:

* ``obstore get_ranges``: one call; it merges ranges less than 1 MiB apart into one request
  and runs up to 10 requests at once.
* ``obstore get_ranges coalesce=0``: the same without merging.
* ``obstore async, 32 in flight``: one ``get_range_async`` per range, 32 at a time (what
  chute's transport does, with ``If-Match`` on every request).
* ``s3fs cat_ranges, 32 in flight`` and ``s3fs cat_ranges`` with its default batch size.

Run: ``PYTHONPATH=src python benchmarks/bench_remote_clients.py`` (needs ``chute[remote]``,
``s3fs`` and ``moto[server]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

LATENCY = 0.020
SIZE = 4 * 1024 * 1024  # moto copies the whole object on every GET: keep it small
COUNT = 200
PROXY = """
import sys, time
sys.path.insert(0, {folder!r})
from fault_proxy import FaultProxy
proxy = FaultProxy({port})
proxy.configure(latency={latency}, methods=())
print(proxy.url, flush=True)
time.sleep(1e9)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(port: int) -> None:
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def _time(fn, repeats: int = 5) -> tuple[float, float]:
    """Median wall time and median CPU time of this (the client's) process, in seconds."""
    fn()  # warm the connection pool
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(times), statistics.median(cpu)


@contextlib.contextmanager
def s3_servers() -> Iterator[tuple[str, str]]:
    """moto's S3 and the latency proxy, each in a process: (moto's URL, the proxy's)."""
    port = _free_port()
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    folder = str(Path(__file__).resolve().parents[1] / "tests" / "remote")
    code = PROXY.format(folder=folder, port=port, latency=LATENCY)
    proxy = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        _wait_for(port)
        assert proxy.stdout is not None
        yield f"http://127.0.0.1:{port}", proxy.stdout.readline().strip()
    finally:
        for process in (proxy, moto):
            process.kill()
            process.wait()


def main() -> None:
    import obstore
    import s3fs
    from obstore.store import S3Store

    with s3_servers() as (_, url):
        os.environ.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test")
        store = S3Store(
            "bench", endpoint=url, region="us-east-1", client_options={"allow_http": True}
        )
        fs = s3fs.S3FileSystem(endpoint_url=url, key="test", secret="test")
        fs.mkdir("bench")
        obstore.put(store, "blob", os.urandom(SIZE))
        print(f"{COUNT} ranged GETs, {LATENCY * 1000:.0f} ms added per request, median of 5")
        for length in (1024, 64 * 1024):
            step = (SIZE - length) // COUNT
            starts = [i * step for i in range(COUNT)]
            ends = [s + length for s in starts]

            async def per_range(starts=starts, ends=ends) -> list:
                gate = asyncio.Semaphore(32)

                async def one(s: int, e: int):
                    async with gate:
                        return await obstore.get_range_async(store, "blob", start=s, end=e)

                return await asyncio.gather(*(one(s, e) for s, e in zip(starts, ends)))

            cases = {
                "obstore get_ranges": lambda s=starts, e=ends: obstore.get_ranges(
                    store, "blob", starts=s, ends=e
                ),
                "obstore get_ranges coalesce=0": lambda s=starts, e=ends: obstore.get_ranges(
                    store, "blob", starts=s, ends=e, coalesce=0
                ),
                "obstore async, 32 in flight": lambda f=per_range: asyncio.run(f()),
                "s3fs cat_ranges, 32 in flight": lambda s=starts, e=ends: fs.cat_ranges(
                    ["bench/blob"] * COUNT, s, e, batch_size=32
                ),
                "s3fs cat_ranges, default batch": lambda s=starts, e=ends: fs.cat_ranges(
                    ["bench/blob"] * COUNT, s, e
                ),
            }
            for name, fn in cases.items():
                seconds, cpu = _time(fn)
                print(
                    f"{length // 1024:>3} KiB  {name:<32} {seconds * 1000:8.1f} ms"
                    f"  client CPU {cpu * 1000:6.1f} ms"
                )


if __name__ == "__main__":
    main()
