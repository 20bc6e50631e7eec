"""Accelerator and framework interop (JAX ``device_put`` and the like).

Optional dependencies are imported only when a function needs them; without
one, the call raises an ``ImportError`` that names the extra to install
(``pip install chute[jax]``).
"""
