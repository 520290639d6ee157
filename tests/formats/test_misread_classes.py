"""One test per class of misread that issue #43 found in host formats; each fails on the code before #43
(checked against b36c4d2). Recordings: tests/fixtures/ethtool/SOURCES.md, tests/fixtures/gpu/SOURCES.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fabricscope.collectors.formats import load
from fabricscope.core.errors import ParseError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REG = load()


def _read(fmt: str, path: Path, **options: str):  # noqa: ANN202
    return REG.get(fmt).read(path, "h:e", 1.0, **options)


def _by(samples: list) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.metric, tuple(sorted((s.labels or {}).items()))): s.value for s in samples}


def test_e810_with_64_queue_pairs_is_ice_not_virtio() -> None:
    r = _read("ethtool-S", FIXTURES / "ethtool/ice-ethq/ethtool-S.txt")
    got = _by(r.samples)
    assert got[("rx_bytes_total", ())] == 848_255_752  # rx_bytes.nic, not the 128 queue keys' sum
    assert all(got[(f"{d}_pause_frames_total", (("priority", str(p)),))] == 0 for d in ("rx", "tx") for p in range(8))
    assert "driver sniffed as ice" in r.guesses[0]


def test_bnxt_en_current_ring_discard_names() -> None:
    r = _read("ethtool-S", FIXTURES / "heldback/host/ethtool/bnxt_en-ethq/ethtool-S.txt", driver="bnxt_en")
    assert _by(r.samples)[("rx_discards_total", ())] == 655_430_134 + 49_337  # rx_total_ring_discards + port
    assert "rx_total_ring_discards" not in r.unmapped


def test_ena_is_recognised_and_allowances_are_its_drop_signal() -> None:
    r = _read("ethtool-S", FIXTURES / "ethtool/ena-allowance-grep-paste/ethtool-S.txt")
    got = _by(r.samples)
    assert "driver sniffed as ena" in r.guesses[0]
    assert {lb: v for (m, lb), v in got.items() if m == "allowance_exceeded_total"} == {
        (("limit", x),): (14368 if x == "bw_out" else 0) for x in ("bw_in", "bw_out", "pps", "conntrack", "linklocal")}
    full = _read("ethtool-S", FIXTURES / "ethtool/ena-ethq/ethtool-S.txt")
    assert "driver sniffed as ena" in full.guesses[0]
    assert _by(full.samples)[("rx_bytes_total", ())] == 186_106_995_835  # 8 queues' queue_N_rx_bytes summed


def test_mlx5_per_priority_discards_are_mapped() -> None:
    r = _read("ethtool-S", FIXTURES / "ethtool/mlx5-connectx-100g-cn-notes/ethtool-S.txt", driver="mlx5_core")
    assert ("rx_discards_total", (("priority", "0"),)) in _by(r.samples)
    assert "rx_prio0_discards" not in r.unmapped


def test_mlx5_outbound_pci_stalled_is_a_ratio_gauge_not_a_counter(tmp_path: Path) -> None:
    raw = tmp_path / "s.txt"
    raw.write_text("NIC statistics:\n     rx_bytes_phy: 10\n     outbound_pci_stalled_rd: 37\n"
                   "     outbound_pci_stalled_wr: 100\n")
    got = _by(_read("ethtool-S", raw, driver="mlx5_core").samples)
    assert got[("pcie_outbound_stalled_ratio", (("direction", "read"),))] == pytest.approx(0.37)
    assert got[("pcie_outbound_stalled_ratio", (("direction", "write"),))] == pytest.approx(1.0)
    assert not any(m.startswith("ethtool_outbound_pci_stalled") for m, _ in got)


def test_a_grep_filtered_paste_without_header_is_read() -> None:
    for case in ("ena-allowance-grep-paste", "i40e-ethq", "mlx5_core-ethq"):  # all three have no header
        raw = FIXTURES / f"ethtool/{case}/ethtool-S.txt"
        assert not raw.read_text().lstrip().startswith("NIC statistics:")
        assert REG.sniff(raw) is REG.get("ethtool-S"), case
        assert _read("ethtool-S", raw).samples, case


def test_driver_option_confirms_and_guesses_exit_3(tmp_path: Path) -> None:
    path = str(FIXTURES / "ethtool/i40e-ethq/ethtool-S.txt")
    run = [sys.executable, "-m", "fabricscope", "parse", path, "--ts", "1"]
    guessed = subprocess.run(run, capture_output=True, text=True, timeout=60, check=False)
    confirmed = subprocess.run([*run, "--driver", "i40e"], capture_output=True, text=True, timeout=60, check=False)
    assert guessed.returncode == 3 and "guess: driver sniffed as i40e" in guessed.stderr
    assert confirmed.returncode == 0 and guessed.stdout == confirmed.stdout


def test_dcgm_gpu_in_mig_mode_without_device_row_keeps_its_fields() -> None:
    r = _read("dcgm-exporter", FIXTURES / "gpu/a800-mig-dcgm-exporter-msxf/metrics.txt")
    gpu0 = {s.metric: s.value for s in r.samples if s.source == "h:e:gpu0" and not s.labels}
    assert gpu0 == {"gpu_sm_clock_hz": 1410e6, "gpu_memory_clock_hz": 1593e6, "gpu_temperature_celsius": 33.0}
    assert any("h:e:gpu0: no device-level row" in p for p in r.problems)


def test_dcgm_mig_instance_fields_are_labelled_mig(tmp_path: Path) -> None:
    raw = tmp_path / "m.txt"
    raw.write_text("".join(f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="0",UUID="GPU-a",GPU_I_PROFILE="3g.40gb",'
                           f'GPU_I_ID="{i}"}} {v}\n' for i, v in ((1, 0.81), (2, 0.25))))
    got = _by(_read("dcgm-exporter", raw).samples)
    assert got == {("gpu_engine_active_ratio", (("mig", "1"),)): 0.81,
                   ("gpu_engine_active_ratio", (("mig", "2"),)): 0.25}


def test_psi_resource_is_never_guessed_as_cpu_from_a_name(tmp_path: Path) -> None:
    io = (FIXTURES / "host/thisvm-6.18/proc/pressure/io").read_text()
    raw = tmp_path / "node3-psi.txt"
    raw.write_text(io)
    with pytest.raises(ParseError, match="--resource"):
        _read("proc-pressure", raw)
    got = _by(_read("proc-pressure", raw, resource="io").samples)
    assert {m for m, _ in got} == {"io_pressure_seconds_total"}


def test_psi_of_a_cgroup_carries_its_cgroup(tmp_path: Path) -> None:
    path = FIXTURES / "host/thisvm-6.18/sys/fs/cgroup/fabricscope-rec/cpu.pressure"
    guessed = _read("proc-pressure", path)
    assert {s.labels["cgroup"] for s in guessed.samples} == {"fabricscope-rec"} and guessed.guesses
    named = _read("proc-pressure", path, cgroup="job.slice/rank0", resource="cpu")
    assert {s.labels["cgroup"] for s in named.samples} == {"job.slice/rank0"} and not named.guesses


def test_topo_cell_run_into_the_affinity_column_does_not_shift_it(tmp_path: Path) -> None:
    text = (FIXTURES / "gpu/puget-wrx90-2gpu-2nic-stelline/nvidia-smi-topo-m.txt").read_text()
    raw = tmp_path / "topo.txt"
    raw.write_text(text.replace("NODE    0-23", "NODE0-23"))  # nvidia-smi on narrow columns
    from fabricscope.collectors.host.gpu.topo_matrix import parse_topo_matrix

    topo = parse_topo_matrix(raw.read_text())
    assert topo.cpu_affinity["GPU0"] == "0-23" and topo.numa_affinity["GPU0"] == "0"  # not "0" and None
    assert topo.link("GPU0", "NIC1") == "NODE"
    r = _read("nvidia-smi-topo", raw)
    labels = {s.source: s.labels for s in r.samples if s.metric == "gpu_nic_locality_rank"}
    assert labels["h:e:gpu0"]["cpu_affinity"] == "0-23" and labels["h:e:gpu0"]["numa_affinity"] == "0"
    assert any("ran into the next column" in p for p in r.problems)
    assert r.guesses and "header order" in r.guesses[0]  # the paste is off its tab stops: a layout guess


def test_parse_lists_every_host_format_with_its_options() -> None:
    out = subprocess.run([sys.executable, "-m", "fabricscope", "parse", "--list"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    lines = {ln.split()[0]: ln for ln in out.splitlines()}
    assert "--driver" in lines["ethtool-S"] and "--resource" in lines["proc-pressure"]
    assert {"dcgm-exporter", "nvidia-smi-topo"} <= set(lines)
    json.dumps(lines)  # plain text, one format a line


# A paste, a heredoc or a string literal often starts (and ends) with a blank line: prometheus/procfs's
# recorded NFS v4.1 mountstats (tests/fixtures/nfs/procfs-k8s-nfs41-node-red) is such a literal, and before
# i43s it was not recognised at all, and /proc/net/snmp or netstat with a blank line were refused.
BLANK_LED = [
    ("nfs-mountstats", "nfs/telegraf-nfsclient/mountstats"),
    ("proc-net-snmp", "host/sosreport-rhel8-hyperv/proc/net/snmp"),
    ("proc-net-netstat", "host/webpage-rhel5/proc/net/netstat"),
    ("softnet-stat", "host/d2000-arm-linux2.6.16/proc/net/softnet_stat"),
    ("diskstats", "diskstats/webpage-rhel5/diskstats"),
    ("lustre-stats", "lustre/obdfilter-OST0001-v2.12/stats"),
]


@pytest.mark.parametrize(("fmt", "rel"), BLANK_LED, ids=[f for f, _ in BLANK_LED])
def test_blank_lines_around_a_recording_change_nothing(fmt: str, rel: str, tmp_path: Path) -> None:
    raw = FIXTURES / rel
    padded = tmp_path / raw.name
    padded.write_text("\n  \n" + raw.read_text() + "\n\n")
    sniffed = REG.sniff(padded)
    assert sniffed is not None and sniffed.name == fmt
    assert _by(sniffed.read(padded, "h:e", 1.0).samples) == _by(_read(fmt, raw).samples)


def test_a_mountstats_literal_with_a_leading_blank_line_is_sniffed() -> None:
    raw = FIXTURES / "nfs/procfs-k8s-nfs41-node-red/mountstats"
    assert raw.read_text().startswith("\ndevice fs.example.com:/volume4/apps/home-automation/")
    fmt = REG.sniff(raw)
    assert fmt is not None and fmt.name == "nfs-mountstats"


def test_lprocfs_usec_sums_are_times() -> None:
    # Lustre prints "[usec]" (tests/fixtures/lustre/hpe-osc-ost0000-v2.10); the reader had wanted "usecs", so no
    # request or operation time of any real stats file came out (i43s)
    raw = FIXTURES / "lustre/hpe-osc-ost0000-v2.10/stats"
    assert "ost_write                 18210286 samples [usec] 119 1348857 110277857878 " in raw.read_text()
    got = _by(_read("lustre-stats", raw).samples)
    assert got[("lustre_ost_write_seconds_total", ())] == pytest.approx(110277.857878)
    assert ("lustre_req_active_seconds_total", ()) not in got  # [reqs]: a count, not a time


def test_lprocfs_name_listed_twice_is_never_overwritten_in_silence(tmp_path: Path) -> None:
    raw = tmp_path / "stats"
    raw.write_text("snapshot_time 1.0 secs.nsecs\nstatfs 5 samples [reqs]\nping 1 samples [reqs]\n"
                   "statfs 9 samples [reqs]\n")
    r = _read("lustre-stats", raw)
    assert _by(r.samples)[("lustre_statfs_total", ())] == 5
    assert r.problems == ["statfs listed 2 times (5, 9 samples): the first kept, the others skipped "
                          "(two counters under one name)"]


# i43t: cloud vendors' NCCL topology files (tests/fixtures/pcie/aws-*, azure-*; docs/heldback/host.md) open with a
# licence comment and name their GPUs and NICs by PCI class alone, with no <gpu>/<nic> element. Before, they were not
# sniffed, and read with -f they gave nothing and no problem line: every link dropped in silence.
def test_nccl_topology_file_devices_named_by_class_are_read_and_said(tmp_path: Path) -> None:
    raw = tmp_path / "topo.xml"
    raw.write_text('<!--\nCopyright (c) 2022, a cloud.\n-->\n<system version="1">\n <cpu numaid="0">\n'
                   '  <pci busid="ffff:ff:01.0" class="0x060400" link_speed="16 GT/s" link_width="16">\n'
                   '   <pci busid="0003:00:00.0" class="0x030200" link_speed="16 GT/s" link_width="16"/>\n'
                   '   <pci busid="0103:00:00.0" class="0x020700" link_speed="8 GT/s" link_width="8"/>\n'
                   '  </pci>\n  <pci busid="0001:00:00.0" class="0x030200" link_speed="" link_width="0"/>\n'
                   '  <pci busid="0000:4f:00.0" link_speed="32 GT/s PCIe/s" link_width="16"/>\n'
                   ' </cpu>\n</system>\n')
    fmt = REG.sniff(raw)
    assert fmt is not None and fmt.name == "nccl-topo"
    r = fmt.read(raw, "h", 1.0)
    got = {(s.source, s.metric): s.value for s in r.samples}
    assert got == {("h:0003:00:00.0", "pcie_link_generation_max"): 4, ("h:0003:00:00.0", "pcie_link_width_max"): 16,
                   ("h:0103:00:00.0", "pcie_link_generation_max"): 3, ("h:0103:00:00.0", "pcie_link_width_max"): 8}
    assert r.problems == [
        "3 devices named by PCI class only (no <gpu>/<nic> element, as in a hand-made NCCL_TOPO_FILE): their links "
        "reported under their bus ids (GPU 0003:00:00.0, NIC 0103:00:00.0, GPU 0001:00:00.0, ...)",
        "1 devices without a PCIe link speed or width (a VM's virtual PCI?): GPU 0001:00:00.0",
        "1 PCI devices with a link but no class and no <gpu>/<nic> element: not read (0000:4f:00.0)"]


def test_aws_p5_topology_without_classes_reads_nothing_and_says_why() -> None:
    raw = FIXTURES / "pcie/aws-p5-48xl-nccl-topo/topo.xml"
    r = _read("nccl-topo", raw)
    assert r.samples == []
    assert r.problems == ["32 PCI devices with a link but no class and no <gpu>/<nic> element: not read "
                          "(0000:4f:00.0, 0000:50:00.0, 0000:51:00.0, 0000:52:00.0, ...)",
                          "8 <pci> entries carry a bus id only (no class, no link): not read"]


# i43t: hwloc's captures of real machines (tests/fixtures/sysfs_net/hwloc-*, docs/heldback/host.md) are whole /sys
# trees: class/net, class/infiniband and PCIe links in one. Sniffed, they were read as whichever format sorts first,
# exit 0 and no guess line; and entries whose targets the copy did not keep were skipped without a word.
def test_a_whole_sys_tree_sniffed_says_which_other_formats_it_holds() -> None:
    tree = FIXTURES / "sysfs_net/hwloc-40intel64-2g2n4c/sys"
    proc = subprocess.run([sys.executable, "-m", "fabricscope", "parse", str(tree), "--device", "h", "--ts", "1"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 3, proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("summary "))
    summary = json.loads(line.removeprefix("summary "))
    assert summary["format"] == "sysfs-infiniband"
    assert summary["guesses"] == ["sniffed as sysfs-infiniband, but this input also reads as sysfs-net, sysfs-pcie: "
                                  "name the one meant with --format"]


def test_class_entries_with_nothing_behind_them_are_said(tmp_path: Path) -> None:
    import shutil

    net = tmp_path / "sys/class/net"
    net.mkdir(parents=True)
    shutil.copytree(FIXTURES / "sysfs_net/debian12-vm-lo-eth0/sys/class/net/eth0", net / "eth0", symlinks=True)
    (net / "lo").symlink_to("../../devices/virtual/net/lo")  # the copy did not keep the target
    (net / "bonding_masters").write_text("\n")  # a regular file there is not an interface
    r = _read("sysfs-net", tmp_path / "sys")
    assert {s.source for s in r.samples} == {"h:e:eth0"}
    assert r.problems == ["1 interfaces listed with nothing behind them in this tree (a partial copy of /sys?), "
                          "not read: lo"]
    ib = tmp_path / "sys/class/infiniband"
    shutil.copytree(FIXTURES / "sysfs_net/hwloc-40intel64-2g2n4c/sys/class/infiniband/qib0/ports",
                    ib / "qib0/ports", symlinks=True)
    (ib / "scif0").symlink_to("../../devices/scif_dma_0/infiniband/scif0")
    r = _read("sysfs-infiniband", tmp_path / "sys")
    assert r.problems[0] == ("1 RDMA devices listed with no ports/<n>/counters in this tree (a partial copy of "
                             "/sys?), not read: scif0")


# i43t: node_exporter's /proc/pressure/irq (held back, docs/heldback/host.md): Linux 6.1+ has a fourth PSI resource,
# irq, that prints only a "full" line. Before, it was refused ("name it with --resource (cpu, io, memory)"), the
# agent never read it, and in `cat /proc/pressure/*` its line joined io's file.
def test_irq_pressure_is_a_resource_told_by_its_content(tmp_path: Path) -> None:
    held = FIXTURES / "heldback/host/psi/node-exporter"
    raw = tmp_path / "psi.txt"  # no name to guess from: the content (full, no some) says irq
    raw.write_text((held / "irq").read_text() + "\n")
    r = _read("proc-pressure", raw)
    assert [(s.metric, s.labels, s.value) for s in r.samples] == [
        ("irq_pressure_seconds_total", {"level": "full"}, 0.008494)] and r.guesses == []
    every = tmp_path / "all.txt"  # `cat /proc/pressure/*`: ls order, irq between io and memory
    every.write_text("".join((held / n).read_text().rstrip("\n") + "\n" for n in ("cpu", "io", "irq", "memory")))
    got = {(s.metric, s.labels["level"]): s.value for s in _read("proc-pressure", every).samples}
    assert got[("io_pressure_seconds_total", "full")] == 159.229614  # io's own full line, not irq's
    assert got[("irq_pressure_seconds_total", "full")] == 0.008494
    assert got[("memory_pressure_seconds_total", "some")] == 0


def test_the_agent_reads_irq_pressure(tmp_path: Path) -> None:
    import shutil

    from fabricscope.collectors.host.pressure import PressureCollector

    proc = tmp_path / "proc"
    shutil.copytree(FIXTURES / "heldback/host/psi/node-exporter", proc / "pressure")
    got = {(s.metric, s.labels["level"]): s.value for s in PressureCollector("h", proc_root=proc, thermal_root=None)
           .poll() if s.metric.endswith("_pressure_seconds_total")}
    assert got[("irq_pressure_seconds_total", "full")] == 0.008494
    assert got[("cpu_pressure_seconds_total", "some")] == 14.036781
