"""The "Hang: suspects" table of the Job overview dashboard (issue #45 item 4).

Written by tools/build_dashboards.py like the other panels. It shows the open `job_hang` alert's
answer (service/hang: the same content as GET /v1/jobs/{job}/hang, kept current while the alert is
open), one row per suspect, or one row `not hung` while no hang alert is open; Grafana needs no API
access. `source` says what named the suspect (`collectives`: the ranks' collective records, absent
from the stored entry as in the API's default; `nccl_ras`: only an NCCL RAS report), `ras_state`
what NCCL RAS says of it where a report names it. tests/hang/test_hang_e2e.py checks it against the
alert on a real hung job, tests/dashboards/test_hang_panel.py the RAS columns on the real schema.
"""

from __future__ import annotations

from typing import Any

from tools.build_dashboards import JOB, Layout, table


def _array(expr: str) -> str:
    return f"CASE WHEN jsonb_typeof({expr}) = 'array' THEN {expr} ELSE '[]'::jsonb END"


HANG_SQL = f"""
WITH a AS (
  SELECT started_at, summary FROM alerts
  WHERE job = {JOB} AND kind = 'job_hang' AND state = 'firing'
  ORDER BY id DESC LIMIT 1),
s AS (
  SELECT a.started_at, a.summary, x.value AS suspect
  FROM a LEFT JOIN LATERAL jsonb_array_elements({_array("a.summary->'suspects'")}) x ON true)
SELECT CASE WHEN s.started_at IS NULL THEN 'not hung' ELSE 'hung' END AS status,
       s.started_at AS since,
       (s.suspect->>'rank')::int AS rank, s.suspect->>'host' AS host, s.suspect->>'group' AS "group",
       (s.suspect->>'seq')::bigint AS seq, s.suspect->>'op' AS op, s.suspect->>'state' AS state,
       CASE WHEN s.suspect IS NOT NULL THEN coalesce(s.suspect->>'source', 'collectives') END AS source,
       s.suspect->>'ras_state' AS ras_state,
       (SELECT string_agg(w.value, ', ') FROM jsonb_array_elements_text({_array("s.summary->'waiting'")}) w)
         AS waiting
FROM (SELECT 1) one LEFT JOIN s ON true
ORDER BY rank NULLS LAST, "group" NULLS FIRST"""


def hang_panels(lay: Layout) -> list[dict[str, Any]]:
    return [table(lay, "Hang: suspects", HANG_SQL, w=24, h=6,
                  description="While a job_hang alert is open: the ranks that did not enter, or did not finish, "
                              "the collective the others wait in (group, seq, op), and the waiting ranks; one "
                              "row 'not hung' otherwise. source: what named the rank (collectives: its "
                              "collective records; nccl_ras: only an NCCL RAS report); ras_state: what NCCL "
                              "RAS says of it (dead, unresponsive, missing), where a report names it. The live "
                              "answer: GET /v1/jobs/{job}/hang.")]
