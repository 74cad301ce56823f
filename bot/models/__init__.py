"""The model boundary: any OpenAI-compatible chat endpoint, or the offline model when no key is set.

Both implement ``bot.types.ChatModel``; ``bot.wiring.build_model`` chooses between them. The openai
SDK loads on the first call to a model that needs it (``bot.models.sdk``), not when one is built.
"""

from bot.models.offline import NAME as OFFLINE_MODEL
from bot.models.offline import OfflineModel
from bot.models.openai import OpenAIChatModel

__all__ = ["OFFLINE_MODEL", "OfflineModel", "OpenAIChatModel"]
