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


# Label values and counts. A series is keyed by its labels in a unique btree index whose entries
# PostgreSQL caps at about 2.7 kB: a bigger label set was refused by the database as a "program
# limit". LABELS_MAX_BYTES (the UTF-8 canonical JSON of one sample's labels) keeps every entry under
# that cap; the per-value and per-sample bounds say the same earlier and more precisely.
LABEL_VALUE_MAX_LEN = 256
MAX_LABELS = 32
LABELS_MAX_BYTES = 2048

# Free text (source, job, op, group, batch_id): non-empty, at most this many characters, no NUL
# (PostgreSQL text cannot hold one; the server paths check sample sources for it per column).
MIN_TEXT = 1
MAX_TEXT = 512
TEXT_BODY = r"[^\x00]*"

# Job names are also the {job} segment of /v1/jobs/{job}/...: no "/", no control characters, and
# not "." or ".." (URL clients collapse those), or no job URL could reach the job.
_JOB_CHAR = r"[^/\x00-\x1f\x7f]"
_JOB_FIRST = r"[^./\x00-\x1f\x7f]"
JOB_BODY = rf"(?:{_JOB_FIRST}|\.{_JOB_FIRST}|\.\.{_JOB_CHAR}){_JOB_CHAR}*"

NAME = re.compile(python_pattern(NAME_BODY))
LABEL_KEY = re.compile(python_pattern(LABEL_KEY_BODY))
JOB = re.compile(python_pattern(JOB_BODY))

# Integers: step, seq and bytes are PostgreSQL bigint; rank, local_rank and group_size are int.
MAX_INT = 2**63 - 1
MIN_INT = -(2**63)  # integer label values
MAX_INT32 = 2**31 - 1
MIN_RANK = 0  # also step, seq, bytes
MIN_GROUP_SIZE = 1
MIN_PHASE_S = 0.0

# Free-form objects (event attrs, step phases, job labels, the extra attributes of devices,
# interfaces and ranks) are stored as jsonb and served back through JSON encoders that have depth
# limits of their own: 300 levels once made every later GET /v1/jobs a 500. Depth counts containers
# (``{}`` is 1, ``{"a": {}}`` is 2); bytes are those of the compact JSON. Their strings and keys
# hold no NUL, their numbers are finite and their integers fit in 64 bits, as jsonb and the
# encoders need.
MAX_DEPTH = 32
MAX_OBJECT_BYTES = 65_536

# The two ends of a link key one btree entry together (the same ~2.7 kB cap): their UTF-8 bytes.
LINK_ENDS_MAX_BYTES = 2048

# A 422 lists at most this many bad items of a batch (the first error of each, in item order).
MAX_ITEM_ERRORS = 100

# Time range: a timestamp before MIN_TS or more than MAX_FUTURE_S after the server's clock is
# refused. Both are server settings (these are their defaults), so the range is checked by the
# server's two paths, not by the static pydantic models.
MIN_TS = 946_684_800.0  # 2000-01-01T00:00:00Z
MAX_FUTURE_S = 86_400.0

# Rank locality (PUT /v1/jobs/{job} ranks[].locality, issue #17): PCI addresses as sysfs names them
# (domain:bus:device.function, the domain 4 or 8 hex digits), PCIe paths of host bridges and
# bridges, NUMA node numbers below Linux's largest MAX_NUMNODES (1024), PCIe generations up to 7
# and lane counts up to 32 (the widest the specification defines).
PCI_ADDRESS_BODY = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
PCIE_PATH_ITEM_BODY = rf"(?:pci[0-9a-fA-F]{{4,8}}:[0-9a-fA-F]{{2}}|{PCI_ADDRESS_BODY})"
MAX_PCIE_PATH = 32
MAX_NUMA_NODE = 1023
MAX_PCIE_GEN = 7
MAX_PCIE_WIDTH = 32
CPULIST_BODY = r"[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*"
CPULIST_MAX_LEN = 8192
MAX_NODE_LIST = 1024
NCCL_ENV_MAX_LEN = 1024
