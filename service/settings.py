"""One Settings object for the whole service (environment variables, optional ``.env``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import platformdirs
from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("fabricscope", appauthor=False))


class Settings(BaseSettings):
    """fabricscope settings. Every field is ``FABRICSCOPE_<NAME>``; the database also reads ``DATABASE_URL``."""

    model_config = SettingsConfigDict(env_prefix="FABRICSCOPE_", env_file=".env", extra="ignore")

    database_url: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("DATABASE_URL", "FABRICSCOPE_DATABASE_URL")
    )
    data_dir: Path = Field(default_factory=_default_data_dir)
    embedded_port: int = Field(default=54329, ge=1, le=65535)

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)

    # Ingest limits: a batch over max_batch items is 413, so is a body over max_body_bytes.
    max_batch: int = Field(default=50_000, ge=1)
    max_body_bytes: int = Field(default=64 << 20, ge=1024)
    # Timestamps outside [min_ts, now + max_future_s] are rejected with 422 naming the field.
    min_ts: float = 946_684_800.0  # 2000-01-01
    max_future_s: float = 86_400.0
    # When true, samples/events for sources whose device is not in the topology are rejected (422).
    strict_sources: bool = False

    # "TOKEN:scope1,scope2;TOKEN2:admin" — empty means no auth. Scopes: ingest, read, admin.
    tokens: SecretStr | None = None

    pool_size: int = Field(default=8, ge=1)
    db_timeout_s: float = Field(default=3.0, gt=0)
    retry_after_s: int = Field(default=5, ge=1)

    retention_days: int = Field(default=30, ge=1)
    compress_after_days: int = Field(default=2, ge=1)

    # Background work inside `serve`: correlation, alerting, retention (seconds; 0 disables).
    correlate_interval_s: float = Field(default=5.0, ge=0)
    alert_interval_s: float = Field(default=10.0, ge=0)
    retention_interval_s: float = Field(default=3600.0, ge=0)

    log_level: str = "INFO"
    log_json: bool = False

    @field_validator("log_level")
    @classmethod
    def _upper(cls, v: str) -> str:
        v = v.upper()
        if v not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("log_level must be DEBUG, INFO, WARNING or ERROR")
        return v

    def token_scopes(self) -> dict[str, frozenset[str]]:
        if self.tokens is None or not self.tokens.get_secret_value().strip():
            return {}
        out: dict[str, frozenset[str]] = {}
        for part in self.tokens.get_secret_value().split(";"):
            if not part.strip():
                continue
            token, _, scopes = part.strip().partition(":")
            out[token] = frozenset(s.strip() for s in (scopes or "ingest,read").split(",") if s.strip())
        return out


@lru_cache
def get_settings() -> Settings:
    return Settings()
