"""GPU mapping tables: NVML calls, ``nvidia-smi -q -x`` elements and dcgm-exporter fields onto the
canonical metrics of docs/API.md (``gpu_*``, ``pcie_*``). Data, not code: the three readers walk
these tables; adding a field is adding a row.

Units: NVML and nvidia-smi give clocks in MHz, power in mW (NVML) or "W" text (nvidia-smi),
utilisation in percent; the canonical names are Hz, watts and 0-1 ratios, hence the ``scale``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MHZ = 1e6
PERCENT = 0.01

# The clocks-event (formerly "throttle") reasons bitmask: nvml.h ``nvmlClocksEventReason*``, the
# same bits in DCGM_FI_DEV_CLOCK_THROTTLE_REASONS / DCGM_FI_DEV_CLOCKS_EVENT_REASONS. Only reasons
# that mean "the GPU is slower than it could be" (idle and application clocks are choices, not faults).
THROTTLE_BITS: dict[int, str] = {
    0x04: "power_cap",       # SwPowerCap
    0x08: "hw_slowdown",     # HwSlowdown
    0x10: "sync_boost",      # SyncBoost
    0x20: "sw_thermal",      # SwThermalSlowdown
    0x40: "hw_thermal",      # HwThermalSlowdown
    0x80: "hw_power_brake",  # HwPowerBrakeSlowdown
}


def throttle_reasons(mask: int) -> dict[str, float]:
    """``gpu_throttle_active`` per reason from the bitmask: 1 active, 0 not (every reason present)."""
    return {reason: 1.0 if mask & bit else 0.0 for bit, reason in THROTTLE_BITS.items()}


# -- NVML ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NvmlRead:
    """One NVML call per GPU: ``lib.<call>(handle, *args)`` (args name lib constants), optionally
    one attribute of the returned struct, times ``scale``."""

    metric: str
    call: str
    args: tuple[str, ...] = ()
    attr: str | None = None
    scale: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()


NVML_READS: tuple[NvmlRead, ...] = (
    NvmlRead("gpu_sm_clock_hz", "nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM",), scale=MHZ),
    NvmlRead("gpu_memory_clock_hz", "nvmlDeviceGetClockInfo", ("NVML_CLOCK_MEM",), scale=MHZ),
    NvmlRead("gpu_sm_clock_max_hz", "nvmlDeviceGetMaxClockInfo", ("NVML_CLOCK_SM",), scale=MHZ),
    NvmlRead("gpu_power_watts", "nvmlDeviceGetPowerUsage", scale=1e-3),  # milliwatts
    NvmlRead("gpu_temperature_celsius", "nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU",)),
    NvmlRead("gpu_utilization_ratio", "nvmlDeviceGetUtilizationRates", attr="gpu", scale=PERCENT),
    NvmlRead("gpu_memory_utilization_ratio", "nvmlDeviceGetUtilizationRates", attr="memory", scale=PERCENT),
    NvmlRead("pcie_replays_total", "nvmlDeviceGetPcieReplayCounter"),
    NvmlRead("pcie_link_generation", "nvmlDeviceGetCurrPcieLinkGeneration"),
    NvmlRead("pcie_link_generation_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
    NvmlRead("pcie_link_width", "nvmlDeviceGetCurrPcieLinkWidth"),
    NvmlRead("pcie_link_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
    *(NvmlRead("gpu_ecc_errors_total", "nvmlDeviceGetTotalEccErrors", (err, counter),
               labels=(("scope", scope), ("type", kind)))
      for err, kind in (("NVML_MEMORY_ERROR_TYPE_CORRECTED", "corrected"),
                        ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "uncorrected"))
      for counter, scope in (("NVML_VOLATILE_ECC", "volatile"), ("NVML_AGGREGATE_ECC", "aggregate"))),
)

# nvmlDeviceGetRetiredPages(handle, cause) -> list of page addresses: the count is the metric.
NVML_RETIRED_CAUSES: dict[str, str] = {
    "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS": "multiple_single_bit_ecc",
    "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR": "double_bit_ecc",
}
# nvmlDeviceGetRemappedRows(handle) -> (correctable, uncorrectable, pending, failure).
NVML_REMAPPED_FIELDS: dict[int, str] = {0: "correctable", 1: "uncorrectable"}
# nvmlDeviceGetNvLinkErrorCounter(handle, link, counter): counter constant -> label `type`.
NVML_NVLINK_COUNTERS: dict[str, str] = {
    "NVML_NVLINK_ERROR_DL_CRC_FLIT": "crc_flit",
    "NVML_NVLINK_ERROR_DL_CRC_DATA": "crc_data",
    "NVML_NVLINK_ERROR_DL_REPLAY": "replay",
    "NVML_NVLINK_ERROR_DL_RECOVERY": "recovery",
}

# -- nvidia-smi -q -x ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class XmlRead:
    """The text of ``path`` (ElementTree path under ``<gpu>``), its number times ``scale``."""

    path: str
    metric: str
    scale: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()


def _ecc(scope: str, kind: str) -> tuple[tuple[str, str], ...]:
    return (("scope", scope), ("type", kind))


XML_READS: tuple[XmlRead, ...] = (
    XmlRead("clocks/sm_clock", "gpu_sm_clock_hz", MHZ),
    XmlRead("clocks/mem_clock", "gpu_memory_clock_hz", MHZ),
    XmlRead("max_clocks/sm_clock", "gpu_sm_clock_max_hz", MHZ),
    # Driver >= 535 prints instant/average draw; older ones one power_draw (and power_readings).
    XmlRead("gpu_power_readings/instant_power_draw", "gpu_power_watts"),
    XmlRead("gpu_power_readings/power_draw", "gpu_power_watts"),
    XmlRead("power_readings/power_draw", "gpu_power_watts"),
    XmlRead("temperature/gpu_temp", "gpu_temperature_celsius"),
    XmlRead("utilization/gpu_util", "gpu_utilization_ratio", PERCENT),
    XmlRead("utilization/memory_util", "gpu_memory_utilization_ratio", PERCENT),
    XmlRead("pci/replay_counter", "pcie_replays_total"),
    XmlRead("pci/pci_gpu_link_info/pcie_gen/current_link_gen", "pcie_link_generation"),
    XmlRead("pci/pci_gpu_link_info/pcie_gen/max_link_gen", "pcie_link_generation_max"),
    XmlRead("pci/pci_gpu_link_info/link_widths/current_link_width", "pcie_link_width"),
    XmlRead("pci/pci_gpu_link_info/link_widths/max_link_width", "pcie_link_width_max"),
    # ECC: older drivers split single/double bit and device memory/register file; newer ones
    # print sram_/dram_ totals. Several elements of one series are summed.
    *(XmlRead(f"ecc_errors/{scope}/{el}", "gpu_ecc_errors_total", labels=_ecc(scope, kind))
      for scope in ("volatile", "aggregate")
      for el, kind in (("sram_correctable", "corrected"), ("dram_correctable", "corrected"),
                       ("sram_uncorrectable", "uncorrected"), ("sram_uncorrectable_parity", "uncorrected"),
                       ("sram_uncorrectable_secded", "uncorrected"), ("dram_uncorrectable", "uncorrected"),
                       ("single_bit/total", "corrected"), ("double_bit/total", "uncorrected"))),
    XmlRead("retired_pages/multiple_single_bit_retirement/retired_count", "gpu_retired_pages_total",
            labels=(("cause", "multiple_single_bit_ecc"),)),
    XmlRead("retired_pages/double_bit_retirement/retired_count", "gpu_retired_pages_total",
            labels=(("cause", "double_bit_ecc"),)),
    XmlRead("remapped_rows/remapped_row_corr", "gpu_remapped_rows_total", labels=(("cause", "correctable"),)),
    XmlRead("remapped_rows/remapped_row_unc", "gpu_remapped_rows_total", labels=(("cause", "uncorrectable"),)),
)
# <clocks_event_reasons> (driver >= 535) or <clocks_throttle_reasons>: element suffix -> reason.
XML_THROTTLE_ELEMENTS: dict[str, str] = {
    "sw_power_cap": "power_cap",
    "hw_slowdown": "hw_slowdown",
    "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal",
    "hw_thermal_slowdown": "hw_thermal",
    "hw_power_brake_slowdown": "hw_power_brake",
}

# -- dcgm-exporter ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DcgmRule:
    """A dcgm-exporter field (regex, fullmatched) -> metric; label values may name groups ``{1}``."""

    pattern: re.Pattern[str]
    metric: str
    scale: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()


def _d(pattern: str, metric: str, scale: float = 1.0, **labels: str) -> DcgmRule:
    return DcgmRule(re.compile(pattern), metric, scale, tuple(sorted(labels.items())))


_NVL = r"DCGM_FI_DEV_NVLINK_{}_ERROR_COUNT_(?:L(\d+)|(TOTAL))"

DCGM_RULES: tuple[DcgmRule, ...] = (
    _d("DCGM_FI_DEV_SM_CLOCK", "gpu_sm_clock_hz", MHZ),
    _d("DCGM_FI_DEV_MEM_CLOCK", "gpu_memory_clock_hz", MHZ),
    _d("DCGM_FI_DEV_MAX_SM_CLOCK", "gpu_sm_clock_max_hz", MHZ),
    _d("DCGM_FI_DEV_POWER_USAGE", "gpu_power_watts"),
    _d("DCGM_FI_DEV_GPU_TEMP", "gpu_temperature_celsius"),
    _d("DCGM_FI_DEV_GPU_UTIL", "gpu_utilization_ratio", PERCENT),
    _d("DCGM_FI_DEV_MEM_COPY_UTIL", "gpu_memory_utilization_ratio", PERCENT),
    # Per MIG instance where the row carries GPU_I_ID (DCGM_PER_INSTANCE below); 0-1 already.
    _d("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gpu_engine_active_ratio"),
    _d("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replays_total"),
    _d("DCGM_FI_DEV_PCIE_LINK_GEN", "pcie_link_generation"),
    _d("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "pcie_link_generation_max"),
    _d("DCGM_FI_DEV_PCIE_LINK_WIDTH", "pcie_link_width"),
    _d("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "pcie_link_width_max"),
    _d("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "gpu_ecc_errors_total", type="corrected", scope="volatile"),
    _d("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gpu_ecc_errors_total", type="uncorrected", scope="volatile"),
    _d("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "gpu_ecc_errors_total", type="corrected", scope="aggregate"),
    _d("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "gpu_ecc_errors_total", type="uncorrected", scope="aggregate"),
    _d("DCGM_FI_DEV_RETIRED_SBE", "gpu_retired_pages_total", cause="multiple_single_bit_ecc"),
    _d("DCGM_FI_DEV_RETIRED_DBE", "gpu_retired_pages_total", cause="double_bit_ecc"),
    _d("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "gpu_remapped_rows_total", cause="correctable"),
    _d("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "gpu_remapped_rows_total", cause="uncorrectable"),
    _d(_NVL.format("CRC_FLIT"), "gpu_nvlink_errors_total", type="crc_flit", link="{1}"),
    _d(_NVL.format("CRC_DATA"), "gpu_nvlink_errors_total", type="crc_data", link="{1}"),
    _d(_NVL.format("REPLAY"), "gpu_nvlink_errors_total", type="replay", link="{1}"),
    _d(_NVL.format("RECOVERY"), "gpu_nvlink_errors_total", type="recovery", link="{1}"),
)
# Bitmask fields (expanded with THROTTLE_BITS) and the last-XID field (an event, not a sample).
# Fields DCGM reports per MIG GPU instance (profiling and the instance's framebuffer); every other field
# is the whole GPU's, repeated on each instance's row.
DCGM_PER_INSTANCE = re.compile(r"DCGM_FI_PROF_\w+|DCGM_FI_DEV_FB_\w+")
DCGM_THROTTLE_FIELDS = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
DCGM_XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
# DCGM's "no value" sentinels (dcgm_structs.h DCGM_INT64_BLANK = 0x7ffffffffffffff0 and the values
# just above it; DCGM_FP64_BLANK = 140737488355328.0): a reading at or above these is absent.
DCGM_INT64_BLANK = float(0x7FFFFFFFFFFFFFF0)
DCGM_FP64_BLANK = 140737488355328.0
