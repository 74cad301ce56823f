"""The typed keys under which the server keeps its shared objects (``app[SERVICE]``...)."""

from __future__ import annotations

from aiohttp import web

from bot.config import Settings
from bot.runtime import Readiness
from bot.service import PolicyPal

SERVICE: web.AppKey[PolicyPal] = web.AppKey("service", PolicyPal)
SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)
READINESS: web.AppKey[Readiness] = web.AppKey("readiness", Readiness)
