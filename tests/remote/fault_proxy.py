"""A small threaded HTTP proxy that adds latency and injects faults, for the remote tests.

It forwards every request to one upstream server (moto's S3, the GCS emulator) over a
keep-alive connection per proxy thread, and on the way can:

* wait ``latency`` seconds before forwarding (a far-away bucket);
* answer a ``fault_rate`` fraction of the requests whose method is in ``fault_methods``
  with one of ``faults``: ``500``, ``503`` (with an S3-style XML body), ``"reset"``
  (the connection is dropped with a TCP reset, no response) or ``"cut"`` (the upstream's
  answer, its headers whole and its body cut off halfway, then the connection closes)
  or ``"hang"`` (no answer at all until the proxy is configured again or closed: a store
  gone silent; ``wait_for_hung(n)`` returns once ``n`` requests hang);
* answer every matching request with a fault (``fault_rate=1.0``), as an outage does;
* with ``max_in_a_row``, let a request through after that many faults in a row on the
  same method, object and range, so that no read can spend its retry budget.

The choice of which request fails comes from ``random.Random(seed)``: the n-th request
that reaches the proxy gets the same fate in every run.  The proxy counts the requests it
forwarded (``methods``: by HTTP method), the faults it injected, and the largest number of
requests in flight at once.
"""

from __future__ import annotations

import http.client
import http.server
import random
import socket
import struct
import threading
import time
from collections import Counter
from typing import ClassVar

_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te"}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default of 5 drops bursts of connections for a second

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up (as after an injected reset) is no news


class FaultProxy:
    """A proxy on ``127.0.0.1`` in front of ``upstream_port``; ``url`` is its address."""

    def __init__(self, upstream_port: int, *, seed: int = 0) -> None:
        self.upstream_port = upstream_port
        self.latency = 0.0
        self.fault_rate = 0.0
        self.faults: tuple[int | str, ...] = (503,)
        self.fault_methods: frozenset[str] = frozenset({"GET"})
        self.max_in_a_row: int | None = None
        self._in_a_row: dict[tuple[str, str, str | None], int] = {}
        self.requests = 0
        self.methods: Counter[str] = Counter()
        self.injected = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._hung = threading.Semaphore(0)
        self._unhang = threading.Event()
        self._random = random.Random(seed)
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def configure(
        self,
        *,
        latency: float = 0.0,
        fault_rate: float = 0.0,
        faults: tuple[int | str, ...] = (503,),
        methods: tuple[str, ...] = ("GET",),
        seed: int = 0,
        max_in_a_row: int | None = None,
    ) -> None:
        """Sets the behaviour for the requests to come and resets the counters."""
        with self._lock:
            self.latency, self.fault_rate, self.faults = latency, fault_rate, faults
            self.fault_methods = frozenset(methods)
            self.max_in_a_row, self._in_a_row = max_in_a_row, {}
            self._unhang.set()  # the requests left hanging end now
            self._unhang, self._hung = threading.Event(), threading.Semaphore(0)
            self._random = random.Random(seed)
            self.requests = self.injected = self.max_in_flight = 0
            self.methods = Counter()

    def wait_for_hung(self, count: int) -> None:
        """Returns once ``count`` requests hang (the ``"hang"`` fault)."""
        for _ in range(count):
            assert self._hung.acquire(timeout=60), "the requests never came"

    def _hang(self) -> None:
        unhang = self._unhang
        self._hung.release()
        unhang.wait()

    def close(self) -> None:
        self._unhang.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _enter(self, method: str, path: str, byte_range: str | None) -> int | str | None:
        """Counts a request in and decides its fate: a fault to inject, or ``None``."""
        with self._lock:
            self.requests += 1
            self.methods[method] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            draw = self._random.random()
            pick = self._random.choice(self.faults)
            key = (method, path, byte_range)
            if (
                method in self.fault_methods
                and draw < self.fault_rate
                and not (pick == "cut" and method == "HEAD")  # no body to cut
                and (self.max_in_a_row is None or self._in_a_row.get(key, 0) < self.max_in_a_row)
            ):
                self.injected += 1
                self._in_a_row[key] = self._in_a_row.get(key, 0) + 1
                return pick
            self._in_a_row.pop(key, None)
            return None

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


def _handler_for(proxy: FaultProxy) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        local: ClassVar[threading.local] = threading.local()

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                parts = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(parts)
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _forward(self) -> None:
            body = self._body()
            fault = proxy._enter(self.command, self.path, self.headers.get("Range"))
            try:
                if fault == "hang":
                    proxy._hang()
                    self.close_connection = True
                    return
                if proxy.latency:
                    time.sleep(proxy.latency)
                if fault is None or fault == "cut":
                    status, reason, headers, data = self._fetch(body)
            finally:
                # Out before the answer leaves, so a client that sends its next request as
                # soon as this one is answered never sees it counted twice.
                proxy._leave()
            if fault == "reset":
                self._reset()
            elif fault == "cut":
                self._answer(status, reason, headers, data, cut=True)
            elif fault is not None:
                self._fail(int(fault))
            else:
                self._answer(status, reason, headers, data)

        def _reset(self) -> None:
            linger = struct.pack("ii", 1, 0)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            self.close_connection = True
            self.connection.close()

        def _fail(self, status: int) -> None:
            body = (
                b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
                b"<Message>injected by the test proxy</Message></Error>"
            )
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _fetch(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
                self.local.conn = conn
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
            headers["Content-Length"] = str(len(body))
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                reply = conn.getresponse()
                data = reply.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                raise
            return reply.status, reply.reason, reply.getheaders(), data

        def _answer(
            self,
            status: int,
            reason: str,
            headers: list[tuple[str, str]],
            data: bytes,
            cut: bool = False,
        ) -> None:
            self.send_response_only(status, reason)
            length = str(len(data))
            for key, value in headers:
                if key.lower() == "content-length" and self.command == "HEAD":
                    length = value  # a HEAD answer has no body but the object's length
                elif key.lower() not in _HOP_HEADERS and key.lower() != "content-length":
                    self.send_header(key, value)
            self.send_header("Content-Length", length)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data[: len(data) // 2] if cut else data)
            if cut:  # the length promised more: the client sees the body end early
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _forward

    return Handler
