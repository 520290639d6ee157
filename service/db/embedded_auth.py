"""The embedded PostgreSQL's password: the password file, pg_hba.conf, and the upgrade of old clusters.

The password lives in one file in libpq's password-file format (``*:*:*:postgres:<password>``,
mode 0600), so ``psql "$(fabricscope db url)"`` works for the OS user who owns it without the
password ever being printed. Clusters initialised before passwords (``--auth=trust``) are upgraded
on start: TCP lines switch to SCRAM before the server listens, the role gets its password over the
unix socket, then the socket lines switch too and the server reloads.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

from fabricscope.core.errors import ConfigError

_SUPERUSER = "postgres"
_METHOD = "scram-sha-256"
_TRUST = re.compile(r"(?<=\s)trust(?=\s|$)")


def new_password() -> str:
    # URL-safe alphabet: no ':' or '\\' to escape in the password file, nothing to quote in a URL.
    return secrets.token_urlsafe(32)


def write_passfile(path: Path, password: str) -> None:
    """Write atomically, created 0600 (never briefly readable by others)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("# fabricscope: the embedded PostgreSQL's superuser password (libpq password-file format)\n")
        f.write(f"*:*:*:{_SUPERUSER}:{password}\n")
    os.replace(tmp, path)


def read_passfile(path: Path) -> str | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            fields = line.split(":", 4)
            if len(fields) == 5 and fields[3] == _SUPERUSER and fields[4]:
                return fields[4]
    return None


def _rules(pgdata: Path) -> list[str]:
    return (pgdata / "pg_hba.conf").read_text().splitlines(keepends=True)


def _is_rule(line: str, *, local_too: bool) -> bool:
    words = line.split()
    if not words or words[0].startswith("#"):
        return False
    return words[0].startswith("host") or (local_too and words[0] == "local")


def trusts(pgdata: Path) -> bool:
    """Whether any pg_hba.conf rule still lets a client in without a password."""
    hba = pgdata / "pg_hba.conf"
    return hba.exists() and any(_is_rule(line, local_too=True) and _TRUST.search(line) for line in _rules(pgdata))


def rewrite_hba(pgdata: Path, *, local_too: bool) -> None:
    lines = [_TRUST.sub(_METHOD, line) if _is_rule(line, local_too=local_too) else line for line in _rules(pgdata)]
    # Rewritten in place: the file keeps its owner (the server's user when we run as root).
    with (pgdata / "pg_hba.conf").open("w") as f:
        f.writelines(lines)


def set_password_over_socket(socket_dir: Path, port: int, pgdata: Path, passfile: Path) -> None:
    """Give the superuser its password while the socket still trusts, then require it everywhere."""
    import psycopg
    from psycopg import sql

    password = read_passfile(passfile)
    if password is None:
        password = new_password()
        write_passfile(passfile, password)
    with psycopg.connect(host=str(socket_dir), port=port, user=_SUPERUSER, dbname="postgres", autocommit=True) as conn:
        # Only the SCRAM verifier goes over the wire, so not even a statement log could show the password.
        verifier = conn.pgconn.encrypt_password(password.encode(), _SUPERUSER.encode(), _METHOD.encode())
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(_SUPERUSER),
                                                                 sql.Literal(verifier.decode())))
        rewrite_hba(pgdata, local_too=True)
        conn.execute("SELECT pg_reload_conf()")
    _wait_for_password_required(socket_dir, port)


def _wait_for_password_required(socket_dir: Path, port: int, timeout_s: float = 10) -> None:
    """The postmaster applies the reload asynchronously: return once a passwordless login fails."""
    import psycopg

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            # No password from anywhere: not the environment's PGPASSWORD, not ~/.pgpass.
            with psycopg.connect(host=str(socket_dir), port=port, user=_SUPERUSER, dbname="postgres", password="",
                                 passfile=str(socket_dir / "no-such-passfile"), connect_timeout=5):
                pass
        except psycopg.OperationalError as exc:
            if "password" in str(exc):
                return
            raise ConfigError(f"the embedded PostgreSQL went away during its password upgrade: {exc}") from exc
        if time.monotonic() > deadline:
            raise ConfigError("the embedded PostgreSQL still accepts logins without a password after the reload")
        time.sleep(0.05)
