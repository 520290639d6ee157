"""URLs safe to print: credentials (user:password@) removed. Standard library only."""

from __future__ import annotations

import urllib.parse


def redact_url(url: str) -> str:
    """The URL (or comma-separated list of URLs, as NATS takes) without user:password."""
    if "," in url:
        return ",".join(redact_url(u.strip()) for u in url.split(",") if u.strip())
    p = urllib.parse.urlsplit(url)
    if p.username is None and p.password is None:
        return url
    host = p.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if p.port:
        host = f"{host}:{p.port}"
    return urllib.parse.urlunsplit((p.scheme, host, p.path, p.query, p.fragment))


__all__ = ["redact_url"]
