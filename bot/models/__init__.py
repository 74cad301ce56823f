"""The model boundary: any OpenAI-compatible chat endpoint, or the offline model when no key is set.

Both implement ``bot.types.ChatModel``; ``bot.wiring.build_model`` chooses between them.
"""

from typing import TYPE_CHECKING

from bot.models.offline import NAME as OFFLINE_MODEL
from bot.models.offline import OfflineModel

if TYPE_CHECKING:
    from bot.models.openai import OpenAIChatModel

__all__ = ["OFFLINE_MODEL", "OfflineModel", "OpenAIChatModel"]


def __getattr__(name: str) -> object:
    """``OpenAIChatModel`` on first use: the openai SDK takes about 0.4 s to import, and without a key it is unused."""
    if name == "OpenAIChatModel":
        from bot.models.openai import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
