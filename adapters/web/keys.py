"""The console's shared objects on its sub-application (``request.app[GATE]``...)."""

from __future__ import annotations

import jinja2
from aiohttp import web

from adapters.web.access import Access
from adapters.web.auth import Gate, Operator

GATE: web.AppKey[Gate] = web.AppKey("console_gate", Gate)
ACCESS: web.AppKey[Access] = web.AppKey("console_access", Access)
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("console_templates", jinja2.Environment)
OPERATOR: web.RequestKey[Operator] = web.RequestKey("console_operator", Operator)  # whom the gate let in
__all__ = ["ACCESS", "GATE", "OPERATOR", "TEMPLATES", "Operator"]
