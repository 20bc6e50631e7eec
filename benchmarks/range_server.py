"""A minimal HTTP server of ranged GETs over a local folder, with latency added: a store
that keeps up.

moto's S3 server answers a few hundred requests a second on this machine whatever the
client does (it parses and copies in Python, under one GIL), so against it every client
measures moto.  Real object stores serve thousands of GETs a second per prefix.  This
server stands in for such a store: HTTP/1.1 with keep-alive on asyncio, ``HEAD`` and
``GET`` with one ``Range``, files read with ``os.pread``, and ``latency`` seconds awaited
before each answer (as a far-away bucket adds), so requests overlap as they would.  It
serves ``http://127.0.0.1:PORT/<path under root>``; chute reads such URLs as it reads a
bucket (obstore's HTTP store), and a ``.chute-index`` among the files opens the set.

Run ``python range_server.py ROOT LATENCY``: it prints its URL on the first line of
stdout, then serves until killed.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import sys
import urllib.parse

_REASONS = {200: "OK", 206: "Partial Content", 404: "Not Found", 405: "Method Not Allowed",
            416: "Range Not Satisfiable"}  # fmt: skip


class _Files:
    """Open files of ``root`` by URL path, with what HEAD tells about each."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self._open: dict[str, tuple[int, int, str, str]] = {}

    def get(self, path: str) -> tuple[int, int, str, str] | None:
        """``(fd, size, etag, last_modified)`` of the file at URL ``path``, or None."""
        found = self._open.get(path)
        if found is None:
            full = os.path.realpath(os.path.join(self.root, urllib.parse.unquote(path).lstrip("/")))
            if not full.startswith(self.root + os.sep) or not os.path.isfile(full):
                return None
            fd = os.open(full, os.O_RDONLY)
            stat = os.fstat(fd)
            etag = f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"'
            found = (fd, stat.st_size, etag, email.utils.formatdate(stat.st_mtime, usegmt=True))
            self._open[path] = found
        return found


def _range(header: str, size: int) -> tuple[int, int] | None:
    """``(start, end)`` (end exclusive) of a one-range ``bytes=a-b`` header within ``size``."""
    unit, _, spec = header.partition("=")
    first, _, last = spec.partition("-")
    if unit.strip() != "bytes" or "," in spec:
        return None
    if not first:  # bytes=-n: the last n bytes
        return max(0, size - int(last)), size
    start = int(first)
    end = min(size, int(last) + 1) if last else size
    return (start, end) if start < end else None


async def _answer(files: _Files, latency: float, method: str, target: str,
                  headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    await asyncio.sleep(latency)
    if method not in ("GET", "HEAD"):
        return 405, {}, b""
    found = files.get(urllib.parse.urlsplit(target).path)
    if found is None:
        return 404, {}, b""
    fd, size, etag, modified = found
    meta = {"ETag": etag, "Last-Modified": modified, "Accept-Ranges": "bytes"}
    if method == "HEAD":
        return 200, {**meta, "Content-Length": str(size)}, b""
    wanted = headers.get("range")
    if wanted is None:
        return 200, meta, os.pread(fd, size, 0)
    span = _range(wanted, size)
    if span is None:
        return 416, {"Content-Range": f"bytes */{size}"}, b""
    start, end = span
    body = os.pread(fd, end - start, start)
    return 206, {**meta, "Content-Range": f"bytes {start}-{end - 1}/{size}"}, body


async def _connection(files: _Files, latency: float, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:  # fmt: skip
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            method, target, _ = line.decode("latin-1").split(" ", 2)
            headers: dict[str, str] = {}
            while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = raw.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if int(headers.get("content-length", "0")):
                await reader.readexactly(int(headers["content-length"]))
            status, extra, body = await _answer(files, latency, method, target, headers)
            if "Content-Length" not in extra:
                extra["Content-Length"] = str(len(body))
            head = f"HTTP/1.1 {status} {_REASONS[status]}\r\n" + "".join(
                f"{k}: {v}\r\n" for k, v in extra.items()
            )
            writer.write(head.encode("latin-1") + b"\r\n" + (body if method == "GET" else b""))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        return
    finally:
        writer.close()


async def _serve(root: str, latency: float) -> None:
    files = _Files(root)
    server = await asyncio.start_server(
        lambda r, w: _connection(files, latency, r, w), "127.0.0.1", 0, backlog=1024
    )
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], float(sys.argv[2])))
