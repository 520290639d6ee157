"""The constraints of the v1 ingest contract (docs/API.md), defined once.

Three validators enforce them: the pydantic models of ``service.schemas`` (``/openapi.json``
and the model tests), the msgspec fast path of ``service.ingest.fast`` and the reference loop of
``service.ingest.validate``. They once drifted apart (a ``$`` let a trailing newline through one of
them); each now derives its checks from the constants below, and tests/ingest/test_contract.py
sends values on both sides of every bound through all three.
"""

from __future__ import annotations

import re

# Metric names and event kinds: snake_case.
NAME_MAX_LEN = 128
NAME_BODY = rf"[a-z][a-z0-9_]{{0,{NAME_MAX_LEN - 1}}}"
# Label names: Prometheus-style identifiers.
LABEL_KEY_MAX_LEN = 64
LABEL_KEY_BODY = rf"[A-Za-z_][A-Za-z0-9_]{{0,{LABEL_KEY_MAX_LEN - 1}}}"


def python_pattern(body: str) -> str:
    """For Python's ``re`` (the reference loop, msgspec): ``\\Z``, since ``$`` also matches before a
    trailing newline there."""
    return rf"^{body}\Z"


def schema_pattern(body: str) -> str:
    """For pydantic's Rust regex engine and JSON Schema (ECMA-262), where ``$`` is the end of the text."""
    return rf"^{body}$"


NAME = re.compile(python_pattern(NAME_BODY))
LABEL_KEY = re.compile(python_pattern(LABEL_KEY_BODY))

# Free text (source, job, op, group, batch_id): non-empty, at most this many characters.
MIN_TEXT = 1
MAX_TEXT = 512

# Integers are stored as PostgreSQL bigint.
MAX_INT = 2**63 - 1
MIN_RANK = 0  # also step, seq, bytes
MIN_GROUP_SIZE = 1
MIN_PHASE_S = 0.0

# Time range: a timestamp before MIN_TS or more than MAX_FUTURE_S after the server's clock is
# refused. Both are server settings (these are their defaults), so the range is checked by the
# server's two paths, not by the static pydantic models.
MIN_TS = 946_684_800.0  # 2000-01-01T00:00:00Z
MAX_FUTURE_S = 86_400.0
