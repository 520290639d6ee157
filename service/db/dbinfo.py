"""What `fabricscope db info` prints: the flavour and versions, and on TimescaleDB the hypertables and
their chunks, the compression state and ratio, and the policies with their last runs (#47)."""

from __future__ import annotations

import psycopg

from fabricscope.service.db.flavour import current


def _size(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"  # pragma: no cover - the loop returns


def report(conn: psycopg.Connection) -> list[str]:
    flavour = current(conn)
    lines = [f"flavour: {flavour.name} ({flavour.describe()})"]
    if not flavour.timescaledb:
        lines.append("tables: plain (time indexes and BRIN); retention: the service's worker deletes old rows")
        return lines
    lines.append("hypertables:")
    for name, chunks, compressed, enabled in conn.execute(
            """SELECT h.hypertable_name, count(c.chunk_name), count(c.chunk_name) FILTER (WHERE c.is_compressed),
                      h.compression_enabled
               FROM timescaledb_information.hypertables h
               LEFT JOIN timescaledb_information.chunks c USING (hypertable_schema, hypertable_name)
               WHERE h.hypertable_schema = current_schema() GROUP BY 1, 4 ORDER BY 1"""):
        state = f"compression on, {compressed} compressed" if enabled else "compression off"
        lines.append(f"  {name}: {chunks} chunks ({state})")
        if enabled:
            row = conn.execute(
                """SELECT sum(before_compression_total_bytes), sum(after_compression_total_bytes)
                   FROM hypertable_compression_stats(%s::regclass)""", (name,)).fetchone()
            before, after = row if row else (None, None)
            ratio = f"{before / after:.1f}x" if before and after else "-"
            lines.append(f"    compressed chunks: {_size(before)} -> {_size(after)} (ratio {ratio})")
    lines.append("policies:")
    for job, proc, table, every, status, last, nxt in conn.execute(
            """SELECT j.job_id, j.proc_name, coalesce(j.hypertable_name, '-'), j.schedule_interval,
                      s.last_run_status, nullif(s.last_run_started_at, '-infinity'),
                      nullif(s.next_start, '-infinity')
               FROM timescaledb_information.jobs j
               LEFT JOIN timescaledb_information.job_stats s USING (job_id)
               WHERE j.job_id >= 1000 ORDER BY j.job_id"""):
        ran = f"last run {last:%Y-%m-%d %H:%M:%S%z} {status}" if last else "not run yet"
        lines.append(f"  {job} {proc} on {table} every {every}: {ran}; next {nxt:%Y-%m-%d %H:%M:%S%z}"
                     if nxt else f"  {job} {proc} on {table} every {every}: {ran}")
    return lines
