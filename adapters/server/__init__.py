"""``policypal serve``: one aiohttp app hosting every surface, with /healthz, /readyz and /metrics.

It also serves the owner-only control socket beside the embedded index (``adapters.control``), through
which ``policypal index``, ``search``, ``ask``, ``chat`` and ``decide`` reach the server holding the index.
"""

from adapters.server.app import build_app, run_server

__all__ = ["build_app", "run_server"]
