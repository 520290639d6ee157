"""The service's own observability: Prometheus metrics, structured logs, health."""
