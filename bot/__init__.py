"""PolicyPal's platform-neutral core: never imports an adapter.

Top level, the contract and its edges: ``types`` (Inbound, Outcome, ...), ``errors`` (the one
exception tree), ``config`` (Settings), ``service`` (what adapters call), ``pending`` (frozen
actions, decided exactly once), ``cards`` (what a card says), ``policy_tools`` (the model's two
tools) and ``wiring`` (the one place that chooses parts). Sub-packages: ``agent`` (the bounded
loop), ``models``, ``store``, ``helpdesk``, ``tickets``, ``delivery``, ``runtime``.
"""
