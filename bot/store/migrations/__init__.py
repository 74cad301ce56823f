"""Alembic migrations for PolicyPal's tables (run them with ``policypal db upgrade``; see bot.store.migrate)."""
