"""Ingest: validate API.md payloads into columns (fast path, no per-row pydantic) and write them."""
