"""Config files are validated by pydantic models with ``extra="forbid"``; this turns the first
validation error into a ``ConfigError`` naming the field path (``nic.interval_s: must be > 0``).

Input values are deliberately left out of the message: a field may hold a pasted secret.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from fabricscope.core.errors import ConfigError

# pydantic's wording where a shorter one reads better in a config error; others are kept as is
_MESSAGES = {
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
    "model_type": "expected a mapping",
    "dict_type": "expected a mapping",
    "list_type": "expected a list",
    "tuple_type": "expected a list",
    "string_type": "expected a string",
    "bool_type": "expected true or false",
    "float_type": "expected a number",
    "int_type": "expected an integer",
    "literal_error": "expected {expected}",
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "string_too_short": "must not be empty",
}


def field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def config_error(exc: ValidationError, origin: str = "") -> ConfigError:
    """The first error of ``exc`` as ``[origin: ]field.path: message``."""
    err = exc.errors(include_url=False, include_input=False)[0]
    template = _MESSAGES.get(err["type"])
    ctx = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in err.get("ctx", {}).items()}
    msg = template.format(**ctx) if template else err["msg"]
    if err["type"] == "value_error":  # our own validators: drop pydantic's "Value error, " prefix
        msg = str(err.get("ctx", {}).get("error", msg))
    where = field_path(tuple(err["loc"])) or "<root>"
    return ConfigError(f"{origin}: {where}: {msg}" if origin else f"{where}: {msg}")
