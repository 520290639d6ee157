"""Webhook secrets and PagerDuty routing keys at rest: Fernet (AES-128-CBC + HMAC-SHA256) from the
`cryptography` package, with MultiFernet for rotation.

* Keys: `FABRICSCOPE_SECRET_KEYS`, comma-separated, newest first; every key decrypts, the first
  encrypts. Unset, a key is generated at first start in `<data_dir>/secret.key` (0600): enough
  for a laptop, while replicas sharing a database must share the keys through the setting.
* Stored form: `fernet:<token>`. A value without the prefix is a row written before encryption
  (read as it is) until `reencrypt` rewrites it; `reencrypt` also moves rows to the newest key.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import psycopg
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from pydantic import SecretStr

from fabricscope.core.errors import ConfigError, FabricscopeError

log = logging.getLogger("fabricscope.alerts.secrets")

PREFIX = "fernet:"
KEY_FILE = "secret.key"
_COLUMNS = ("secret", "routing_key")


class SecretUnreadable(FabricscopeError):
    """A stored secret that none of the configured keys decrypts (the key was changed or lost)."""


class SecretBox:
    def __init__(self, keys: list[bytes]) -> None:
        self._primary = Fernet(keys[0])
        self._all = MultiFernet([Fernet(k) for k in keys])

    def seal(self, plain: str) -> str:
        return PREFIX + self._all.encrypt(plain.encode()).decode()

    def open(self, stored: str) -> str:
        if not stored.startswith(PREFIX):
            return stored  # written before encryption: `reencrypt` seals it at the next start
        try:
            return self._all.decrypt(stored[len(PREFIX):].encode()).decode()
        except InvalidToken:
            raise SecretUnreadable("no configured key decrypts it (FABRICSCOPE_SECRET_KEYS changed?)") from None

    def is_current(self, stored: str) -> bool:
        """Sealed with the newest key (nothing to rewrite)."""
        if not stored.startswith(PREFIX):
            return False
        try:
            self._primary.decrypt(stored[len(PREFIX):].encode())
        except InvalidToken:
            return False
        return True


def _key_file(data_dir: Path) -> bytes:
    path = data_dir / KEY_FILE
    try:
        key = _read_or_create(path)
        Fernet(key)
    except (OSError, ValueError) as exc:  # ValueError: not a Fernet key (the message never quotes it)
        reason = exc.strerror if isinstance(exc, OSError) else "not a Fernet key"
        raise ConfigError(f"FABRICSCOPE_SECRET_KEYS is not set and the key file {path} cannot be used "
                          f"({reason}): set FABRICSCOPE_SECRET_KEYS or a writable FABRICSCOPE_DATA_DIR") from None
    return key


def _read_or_create(path: Path) -> bytes:
    data_dir = path.parent
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = data_dir / f".{KEY_FILE}.{os.getpid()}.{threading.get_ident()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(Fernet.generate_key() + b"\n")
                f.flush()
                os.fsync(f.fileno())
            try:  # link, not rename: of two processes starting at once, the first key wins for both
                os.link(tmp, path)
                log.info("generated the key for webhook secrets at rest: %s (set FABRICSCOPE_SECRET_KEYS "
                         "where several processes share the database)", path)
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
    key = path.read_bytes().strip()
    if path.stat().st_mode & 0o077:
        log.warning("%s is readable by other users; it should be mode 0600", path)
    return key


_BOXES: dict[tuple[str | None, str], SecretBox] = {}
_LOCK = threading.Lock()


def box_for(keys: SecretStr | None, data_dir: Path) -> SecretBox:
    """The box for these settings (`settings.secret_keys`, `settings.data_dir`), built once."""
    text = None if keys is None else keys.get_secret_value()
    cache_key = (text, str(data_dir))
    with _LOCK:
        box = _BOXES.get(cache_key)
        if box is None:
            box = _BOXES[cache_key] = SecretBox(_parse(text) if text is not None else [_key_file(data_dir)])
    return box


def _parse(text: str) -> list[bytes]:
    keys = [k.strip().encode() for k in text.split(",") if k.strip()]
    if not keys:
        raise ConfigError("FABRICSCOPE_SECRET_KEYS is set but holds no key (unset it to use the key file)")
    for i, key in enumerate(keys, 1):
        try:
            Fernet(key)
        except ValueError:  # the message names the key's position, never the key
            raise ConfigError(f"FABRICSCOPE_SECRET_KEYS: key {i} is not a Fernet key (32 url-safe base64 "
                              "bytes; see docs/security.md)") from None
    return keys


def reencrypt(conn: psycopg.Connection, box: SecretBox) -> int:
    """Seal rows written before encryption and move rows sealed with an older key to the newest
    one; returns the number of webhooks rewritten. Rows no key opens are left as they are."""
    changed = 0
    with conn.transaction():
        rows = conn.execute("SELECT id, secret, routing_key FROM webhooks WHERE secret IS NOT NULL "
                            "OR routing_key IS NOT NULL ORDER BY id FOR UPDATE").fetchall()
        for hook_id, *values in rows:
            new = list(values)
            for i, value in enumerate(values):
                if value is None or box.is_current(value):
                    continue
                try:
                    new[i] = box.seal(box.open(value))
                except SecretUnreadable as exc:
                    log.warning("webhook %s: its %s was left as it is: %s", hook_id, _COLUMNS[i], exc)
            if new != values:
                conn.execute("UPDATE webhooks SET secret = %s, routing_key = %s WHERE id = %s", (*new, hook_id))
                changed += 1
    if changed:
        log.info("webhook secrets re-encrypted with the newest key: %d webhooks", changed)
    return changed
