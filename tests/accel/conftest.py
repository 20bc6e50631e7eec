"""JAX on the CPU backend with 8 devices, for the device_put tests.

``XLA_FLAGS`` is set here, before these tests import JAX.  Another test module
in the same run may have imported JAX already, and then the device count is
fixed; so every test that needs several devices runs in a fresh interpreter
through the ``on_8_devices`` fixture, where the flag always holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

_FLAG = "--xla_force_host_platform_device_count=8"


def _with_flag(env: dict[str, str]) -> dict[str, str]:
    flags = env.get("XLA_FLAGS", "")
    env = dict(env, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = flags if _FLAG in flags else f"{flags} {_FLAG}".strip()
    return env


if "jax" not in sys.modules:
    os.environ.update(_with_flag(dict(os.environ)))


def _run_on_8_devices(script: str, function: str) -> None:
    """Runs ``function`` of the test module ``script`` in a fresh 8-device interpreter."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = _with_flag(dict(os.environ))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-W", "error", script, function],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    if done.returncode:
        pytest.fail(f"{function} failed on 8 devices:\n{done.stdout}\n{done.stderr}")


@pytest.fixture
def on_8_devices() -> Callable[[str, str], None]:
    """``on_8_devices(__file__, "name")`` runs that module function on 8 CPU devices."""
    return _run_on_8_devices
