"""The "Placement: flagged ranks" table of the Job overview dashboard (issue #17, item 4).

Written by tools/build_dashboards.py like the other panels. It reads `job_ranks.locality` (migration
0006) and applies the rules of service/placement/audit.py in SQL, so Grafana needs no API access;
tests/placement/test_dashboard_panel.py checks both agree on the same stored job:
- cross_numa: GPU and NIC NUMA nodes differ;
- shared_nic: more distinct GPUs of a host on the NIC than the job label `gpus_per_nic` (else 1,
  the service's default `FABRICSCOPE_PLACEMENT_GPUS_PER_NIC`);
- rank_off_numa: the GPU's node is neither among the rank's CPU nodes nor its memory nodes (each
  only when reported);
- downtrained_link: GPU or NIC link below its maximum generation or width;
- nccl_env_mismatch: NCCL_IB_HCA does not admit `nic_nearest` (NCCL's matching: `^` excludes, `=`
  exact, else prefix). Only where the hook reported `nic_nearest`; the API also derives the nearest
  NIC from the other ranks' PCIe paths and judges NCCL_SOCKET_IFNAME for socket-only ranks.
"""

from __future__ import annotations

from typing import Any

from tools.build_dashboards import JOB, Layout, table


def _downtrained(side: str) -> str:
    link = f"(r.locality->'{side}_link')"
    return (f"(({link}->>'gen')::int < ({link}->>'max_gen')::int"
            f" OR ({link}->>'width')::int < ({link}->>'max_width')::int)")


def _in_list(node: str, key: str) -> str:
    """``node`` is among the numbers of the locality list ``key``; null when either is absent."""
    return (f"(CASE WHEN {node} IS NULL OR jsonb_typeof(r.locality->'{key}') IS DISTINCT FROM 'array' THEN NULL"
            f" WHEN jsonb_array_length(r.locality->'{key}') = 0 THEN NULL"
            f" ELSE (r.locality->'{key}') @> to_jsonb({node}) END)")


PLACEMENT_SQL = f"""
WITH r AS (
  SELECT jr.rank, jr.host, jr.gpu, jr.nic, jr.locality,
         (jr.locality->>'gpu_numa')::int AS gpu_numa, (jr.locality->>'nic_numa')::int AS nic_numa,
         jr.locality->>'nic_nearest' AS nearest,
         jr.locality->>'nccl_ib_hca' AS spec,
         (SELECT count(DISTINCT x.gpu) FROM job_ranks x
          WHERE x.job = jr.job AND x.host = jr.host AND x.nic = jr.nic) AS gpus_on_nic,
         coalesce(CASE WHEN j.labels->>'gpus_per_nic' ~ '^[0-9]{1,6}$'
                       THEN nullif((j.labels->>'gpus_per_nic')::int, 0) END, 1)
           AS gpus_per_nic
  FROM job_ranks jr JOIN jobs j ON j.name = jr.job
  WHERE jr.job = {JOB}),
m AS (
  SELECT r.rank, bool_or(CASE WHEN starts_with(ltrim(r.spec, '^'), '=') THEN r.nearest = n.name
                              ELSE starts_with(r.nearest, n.name) END) AS hit
  FROM r CROSS JOIN LATERAL (
    SELECT split_part(trim(x), ':', 1) AS name
    FROM unnest(string_to_array(ltrim(ltrim(r.spec, '^'), '='), ',')) AS x WHERE trim(x) <> '') n
  WHERE r.spec IS NOT NULL AND r.nearest IS NOT NULL
  GROUP BY r.rank),
f AS (
  SELECT r.*, concat_ws(', ',
    CASE WHEN r.gpu_numa <> r.nic_numa THEN 'cross_numa' END,
    CASE WHEN r.nic IS NOT NULL AND r.gpu IS NOT NULL AND r.gpus_on_nic > r.gpus_per_nic THEN 'shared_nic' END,
    CASE WHEN NOT {_in_list("r.gpu_numa", "cpu_numa")} OR NOT {_in_list("r.gpu_numa", "mem_nodes")}
         THEN 'rank_off_numa' END,
    CASE WHEN {_downtrained("gpu")} OR {_downtrained("nic")} THEN 'downtrained_link' END,
    CASE WHEN m.hit IS NOT NULL AND (m.hit = starts_with(r.spec, '^')) THEN 'nccl_env_mismatch' END) AS flags
  FROM r LEFT JOIN m ON m.rank = r.rank)
SELECT rank, host, gpu, gpu_numa, nic, nic_numa, nearest AS nic_nearest,
       locality->'gpu_pcie_path'->>0 AS gpu_root, locality->'nic_pcie_path'->>0 AS nic_root,
       locality->>'cpus' AS cpus, locality->>'mem_nodes' AS mem_nodes,
       concat_ws('/', 'gen' || (locality->'gpu_link'->>'gen'), 'x' || (locality->'gpu_link'->>'width')) AS gpu_link,
       concat_ws('/', 'gen' || (locality->'nic_link'->>'gen'), 'x' || (locality->'nic_link'->>'width')) AS nic_link,
       flags
FROM f WHERE flags <> ''
ORDER BY rank LIMIT 1000"""


def placement_panels(lay: Layout) -> list[dict[str, Any]]:
    return [table(lay, "Placement: flagged ranks", PLACEMENT_SQL, w=24, h=8,
                  description="Ranks whose GPU and NIC are on different NUMA nodes, share a NIC, run off the "
                              "GPU's node, have a PCIe link below its maximum, or whose NCCL_IB_HCA leaves "
                              "out the NIC nearest the GPU. The full audit: "
                              "GET /v1/jobs/{job}/placement.")]
