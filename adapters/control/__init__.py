"""The control socket: how `policypal` commands reach the `policypal serve` that holds the embedded index.

The embedded index (qdrant-edge) is one process per path, so while the server holds it no other process
can open it. The server listens on a Unix socket beside the index (mode 0600: only its own user can
connect; nothing is on the network) and does the work itself: ``policypal index`` hands it paths
(``indexing``), and ``search``, ``ask``, ``chat`` and ``decide`` make their service calls there
(``terminal``), so they run on the live bot's service, index, database and model. The CLI tries the
socket first (``client``) and runs the command itself when no server answers. ``listener`` is the
server's end, ``protocol`` the routes and the JSON forms both ends read. Both surfaces use this
package, so it sits beside them rather than inside either (the CLI need not load the server's app).
"""

from typing import TYPE_CHECKING

from adapters.control.client import ControlClient, ControlError, Forwarded, NoServer, forward_index
from adapters.control.protocol import (
    DECIDE,
    DELIVER,
    HELLO,
    INDEX,
    MESSAGE,
    PENDING,
    SEARCH,
    Malformed,
    decided_from_json,
    delivery_from_json,
    inbound_to_json,
    passage_from_json,
    reply_from_json,
    socket_path,
    user_to_json,
)

if TYPE_CHECKING:
    from adapters.control.indexing import index_action
    from adapters.control.listener import serving
    from adapters.control.terminal import terminal_actions

__all__ = [
    "DECIDE",
    "DELIVER",
    "HELLO",
    "INDEX",
    "MESSAGE",
    "PENDING",
    "SEARCH",
    "ControlClient",
    "ControlError",
    "Forwarded",
    "Malformed",
    "NoServer",
    "decided_from_json",
    "delivery_from_json",
    "forward_index",
    "inbound_to_json",
    "index_action",
    "passage_from_json",
    "reply_from_json",
    "serving",
    "socket_path",
    "terminal_actions",
    "user_to_json",
]


def __getattr__(name: str) -> object:
    """The server's end on first use: it loads aiohttp's server, which a command run alone never needs."""
    if name == "index_action":
        from adapters.control.indexing import index_action

        return index_action
    if name == "serving":
        from adapters.control.listener import serving

        return serving
    if name == "terminal_actions":
        from adapters.control.terminal import terminal_actions

        return terminal_actions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
