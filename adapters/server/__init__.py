"""``policypal serve``: one aiohttp app hosting every surface, with /healthz, /readyz and /metrics.

Also the owner-only Unix socket beside the embedded index, through which ``policypal index`` hands
its paths to the server that holds the index.
"""

from adapters.server.app import build_app, run_server
from adapters.server.index_socket import ROUTE as INDEX_ROUTE
from adapters.server.index_socket import Forwarded, forward_index, socket_path

__all__ = ["INDEX_ROUTE", "Forwarded", "build_app", "forward_index", "run_server", "socket_path"]
