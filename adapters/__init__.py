"""The surfaces: Slack, Teams and the terminal, each mapping its platform to the service and back.

Adapters depend on the core (``bot``), never the reverse. ``adapters.cli`` is the composition root
(the ``policypal`` command); ``adapters.server`` hosts the platforms on one aiohttp app;
``adapters.destinations`` and ``adapters.checks`` are the platform halves of the helpdesk
destinations and the configuration check, which need platform code.
"""
