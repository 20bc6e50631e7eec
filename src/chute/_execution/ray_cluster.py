"""The Ray cluster chute's Ray workers run on: found, connected to, or started.

``connect(executor)`` returns the ``ray`` module, initialised: the cluster
this program already connected to, else the one ``executor.address`` (or
``RAY_ADDRESS``) names, else a new local one.  A local cluster chute started
is shut down when the program ends (Ray's own exit hook does it); one it
connected to is left running, and the actors chute made there die with this
program, their owner, as Ray's ownership rules say.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

logger = logging.getLogger("chute")

__all__ = ["connect", "import_ray", "node_of_this_process"]

_lock = threading.Lock()

# Recent Ray logs here, at every start of a local cluster, that the cluster uses token
# authentication; chute's own local cluster keeps Ray's default and leaves the notice out.
_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"


class _TokenNotice(logging.Filter):
    """Leaves out Ray's notice about a new local cluster's token authentication."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is")


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError that names the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            "chute.RayExecutor runs workers on a Ray cluster and needs Ray: "
            "pip install 'chute[ray]'"
        ) from exc
    return ray


def connect(address: str | None) -> Any:
    """``ray``, connected to the cluster ``address`` names (see the module docstring)."""
    ray = import_ray()
    with _lock:
        if ray.is_initialized():
            return ray
        address = address or os.environ.get("RAY_ADDRESS") or None
        notice = logging.getLogger(_TOKEN_LOGGER)
        quiet = _TokenNotice()
        if address is None:  # a cluster of chute's own: Ray's notice about it is not the user's
            notice.addFilter(quiet)
        try:
            ray.init(
                address=address,
                include_dashboard=False,
                logging_level=logging.WARNING,
                log_to_driver=True,
            )
        except ConnectionError as exc:
            raise ConnectionError(
                f"chute.RayExecutor: cannot connect to the Ray cluster at {address!r}: {exc}. "
                "Check the address (ray status on the head node prints it), or leave "
                "address=None and RAY_ADDRESS unset to start a local cluster."
            ) from exc
        finally:
            notice.removeFilter(quiet)
        if address is None:
            logger.info("chute: started a local Ray cluster for RayExecutor's workers.")
        return ray


def node_of_this_process() -> str:
    """Where this process runs, as a person reads it: host name, IP and Ray node id."""
    import socket

    ray = import_ray()
    context = ray.get_runtime_context()
    node_id = context.get_node_id()
    try:
        ip = ray.util.get_node_ip_address()
    except Exception:  # a node without a routable address: its id says enough
        ip = "?"
    return f"{socket.gethostname()} ({ip}, node {node_id[:8]})"


def workers_that_fit(executor: Any) -> int:
    """``num_workers="auto"`` on a cluster: as many workers as its CPUs hold, at least 1."""
    ray = connect(executor.address)
    cpus = float(ray.cluster_resources().get("CPU", 1.0))
    each = float(executor.resources_per_worker.get("CPU", 1.0)) or 1.0
    return max(1, int(cpus // each))
