"""chute's metrics in Prometheus's text format, through ``prometheus_client``.

A custom collector reads ``chute._core.metrics`` when it is scraped, so the loader
itself never calls prometheus_client: counting stays a dict update per request.
Each metric is exported as ``chute_<name>``; counters end in ``_total`` and the
latency histogram has the usual ``_bucket``, ``_sum`` and ``_count`` series.

prometheus_client is an extra (``pip install 'chute[metrics]'``), imported only
when the metrics are exported.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from chute._core import metrics

__all__ = ["MetricsServer", "metrics_text", "start_http_server"]

PREFIX = "chute_"

_registry: Any = None
_registry_lock = threading.Lock()


def _import_prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:
        raise ImportError(
            "chute.monitoring exports metrics through prometheus_client: "
            "pip install 'chute[metrics]'"
        ) from exc
    return prometheus_client


class _Collector:
    """chute's metrics as prometheus_client metric families, read at each scrape."""

    def __init__(self) -> None:
        from prometheus_client import core
        from prometheus_client.utils import floatToGoString

        self._core, self._bound = core, floatToGoString

    def collect(self) -> Iterator[Any]:
        core, values = self._core, metrics.snapshot()
        for name, metric in metrics.METRICS.items():
            value = values[name]
            if metric.labels:
                family = core.CounterMetricFamily(PREFIX + name, metric.help, labels=metric.labels)
                for labels, n in sorted(value.items()):
                    family.add_metric(list(labels), n)
                yield family
            elif metric.kind == "counter":
                yield core.CounterMetricFamily(PREFIX + name, metric.help, value=value)
            elif metric.kind == "gauge":
                yield core.GaugeMetricFamily(PREFIX + name, metric.help, value=value)
            else:
                buckets, total = [], 0
                for bound, n in zip((*metric.buckets, float("inf")), value["buckets"]):
                    total += n
                    buckets.append((self._bound(bound), total))
                yield core.HistogramMetricFamily(
                    PREFIX + name, metric.help, buckets=buckets, sum_value=value["sum"]
                )


def _chute_registry() -> Any:
    """A prometheus_client registry holding chute's collector alone (made once)."""
    global _registry
    prometheus_client = _import_prometheus()
    with _registry_lock:
        if _registry is None:
            registry = prometheus_client.CollectorRegistry(auto_describe=False)
            registry.register(_Collector())
            _registry = registry
    return _registry


def metrics_text() -> str:
    """chute's metrics now, in the Prometheus text exposition format.

    The figures of this process and of its worker processes (each worker sends what
    changed about once a second, and all of it when its share ends).

    Returns:
      The text a Prometheus server scrapes: ``chute_remote_bytes_total``,
      ``chute_remote_read_seconds_bucket{le="..."}``, ...

    Raises:
      ImportError: prometheus_client is not installed (``pip install 'chute[metrics]'``).
    """
    prometheus_client = _import_prometheus()
    return prometheus_client.generate_latest(_chute_registry()).decode()


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    """A thread per request; ``server_close()`` waits for those under way."""

    daemon_threads = False


class _Handler(WSGIRequestHandler):
    timeout = 10.0  # a client that stops mid-request holds a thread (and stop()) no longer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per scrape on stderr is noise


class MetricsServer:
    """An HTTP endpoint serving chute's metrics (``start_http_server`` makes it).

    Args:
      server: The listening HTTP server.
      thread: The thread that serves it.
      addr: The address it listens on.

    Attributes:
      port: The port it listens on (the one the system chose, when asked for port 0).
      url: Its address, ``http://addr:port/metrics``.
    """

    def __init__(self, server: Any, thread: threading.Thread, addr: str) -> None:
        self._server, self._thread = server, thread
        self.port: int = server.server_port
        host = f"[{addr}]" if ":" in addr else addr
        self.url = f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stops serving and closes the port, once the scrapes under way are answered.

        Calling it again does nothing.
        """
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"MetricsServer({self.url!r})"


def start_http_server(port: int, addr: str = "127.0.0.1") -> MetricsServer:
    """Serves chute's metrics over HTTP for a Prometheus server to scrape, on a thread.

    Nothing listens until this is called.  The default address takes connections from
    this machine only; pass ``addr="0.0.0.0"`` for a Prometheus server elsewhere.

    Args:
      port: The TCP port (0: one the system picks; read it from ``.port``).
      addr: The address to listen on.

    Returns:
      A ``MetricsServer``; ``stop()`` it (or use it in a ``with`` block) to close the port.

    Raises:
      ImportError: prometheus_client is not installed (``pip install 'chute[metrics]'``).
      TypeError, ValueError: ``port`` is not an int in ``[0, 65535]``.
      OSError: the port is taken.
    """
    if not isinstance(port, int) or isinstance(port, bool):
        raise TypeError(f"port must be an int (got {port!r} that is a {type(port).__name__}).")
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be in [0, 65535] (got {port}).")
    prometheus_client = _import_prometheus()
    app = prometheus_client.make_wsgi_app(_chute_registry())
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    server_class = type("_Server", (_Server,), {"address_family": family})
    server: Any = make_server(addr, port, app, server_class, handler_class=_Handler)
    thread = threading.Thread(
        target=server.serve_forever, name=f"chute-metrics-{server.server_port}", daemon=True
    )
    thread.start()
    return MetricsServer(server, thread, addr)
