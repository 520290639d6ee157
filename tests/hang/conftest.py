"""Each end-to-end hang test gets its own database and service (as tests/alerts does)."""

from tests.alerts.conftest import make_service, own_db

__all__ = ["make_service", "own_db"]
