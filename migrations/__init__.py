"""Alembic migrations and re-appliable SQL (TimescaleDB policies, views) for fabricscope."""
