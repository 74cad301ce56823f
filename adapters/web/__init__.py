"""The operators' console at /console: runs and traces, knowledge gaps, helpdesk cases, pending actions.

Server-rendered pages (Jinja2) on the aiohttp app that already serves the platforms, with htmx for
filters and paging and nothing to build; every page reads the same without JavaScript. Off unless
``POLICYPAL_CONSOLE_SECRET`` or ``POLICYPAL_CONSOLE_USER_HEADER`` is set (``auth``); traces of runs
built for restricted groups open only for the operators a setting names (``access``). Reads go
through ``bot.store.reports``; the only write is putting a case's failed deliveries back in the outbox.
"""

from adapters.web.app import CONSOLE_PATH, add_console_routes, console_app

__all__ = ["CONSOLE_PATH", "add_console_routes", "console_app"]
