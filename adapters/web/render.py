"""Pages from the package's Jinja2 templates, autoescaped, with what every page shows (who, the nav)."""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime
from typing import Any

import jinja2
from aiohttp import web
from markupsafe import Markup

from adapters.web.keys import GATE, OPERATOR, TEMPLATES, Operator
from bot.helpdesk import case_id_for

NAV = (
    ("overview", "Overview"),
    ("runs", "Runs"),
    ("gaps", "Knowledge gaps"),
    ("cases", "Helpdesk"),
    ("actions", "Pending actions"),
)


def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("adapters.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt name fails the page test, not silently blank
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["money"] = lambda usd: f"${usd:,.4f}"
    env.filters["case_id"] = case_id_for  # HD-1001, as the person and the helpdesk know it
    return env


def operator_of(request: web.Request) -> Operator:
    operator: Operator = request[OPERATOR]
    return operator


def page(request: web.Request, template: str, *, status: int = 200, **context: Any) -> web.Response:
    """The page ``template`` for this request's operator; htmx requests may ask for a fragment template."""
    operator = request.get(OPERATOR)
    gate = request.app[GATE]
    # Signed out, the stylesheet is behind the gate too: the sign-in page brings its own few rules.
    inline_css = Markup(SIGN_IN_CSS) if operator is None else None
    template_context = {
        "inline_css": inline_css,
        "operator": operator,
        "form_token": gate.form_token(operator) if operator else "",
        "nav": NAV,
        "here": request.match_info.route.name or "",
        "signs_in": gate.signs_in,
        "url": lambda name, **parts: str(request.app.router[name].url_for(**{k: str(v) for k, v in parts.items()})),
    }
    body = request.app[TEMPLATES].get_template(template).render(**template_context, **context)
    headers = SIGNED_OUT_HEADERS if inline_css else SECURITY_HEADERS
    return web.Response(text=body, status=status, content_type="text/html", headers=headers)


SIGN_IN_CSS = (
    "body{margin:0;font:15px/1.5 system-ui,sans-serif;color:#1f2328}"
    "header{padding:.6rem 1.2rem;background:#f6f8fa;border-bottom:1px solid #d1d9e0}"
    "main{max-width:28rem;margin:3rem auto;padding:0 1rem}"
    "label{display:block;margin:.8rem 0 .3rem;color:#59636e}"
    "input{width:100%;padding:.45rem;font:inherit;border:1px solid #d1d9e0;border-radius:4px}"
    "button{margin-top:.8rem;padding:.45rem 1rem;font:inherit;background:#0b5cad;color:#fff;border:0;border-radius:4px}"
    ".error{color:#b42318}"
)
_SIGN_IN_HASH = base64.b64encode(hashlib.sha256(SIGN_IN_CSS.encode()).digest()).decode()
_CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'{extra}; frame-ancestors 'none'"
# Pages are read by operators only: no framing, no referrer leaking run ids, scripts from us only.
SECURITY_HEADERS = {
    "Content-Security-Policy": _CSP.format(extra=""),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
SIGNED_OUT_HEADERS = {**SECURITY_HEADERS, "Content-Security-Policy": _CSP.format(extra=f" 'sha256-{_SIGN_IN_HASH}'")}


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "–"
