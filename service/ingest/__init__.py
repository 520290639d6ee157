"""Ingest: validate docs/API.md payloads into columns (fast path, no per-row pydantic) and write them."""
