"""The NVML GPU collector: per GPU ``host:gpuN`` (N = NVML index, the training hook's ``gpu``).

``pynvml`` (package ``nvidia-ml-py``, NVIDIA's maintained binding, extra ``fabricscope[gpu]``) is
imported lazily: on a host without it the agent logs one INFO line and runs without GPU metrics;
where ``nvmlInit`` fails (no driver, a CPU node) likewise. Every NVML call goes through ``lib``, an
injected object with pynvml's names, so the mapping (``maps.NVML_*``) is tested without a GPU.

A call a GPU does not support (``NVML_ERROR_NOT_SUPPORTED``: ECC on a consumer card, NVLink on a
PCIe card) is remembered and not retried; its metric is absent. XID errors come from an NVML event
set (``nvmlEventTypeXidCriticalError``) drained with a zero timeout at each poll, so the agent's
loop never blocks on it; each becomes a ``gpu_xid`` event with ``attrs={"code": N}``.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from fabricscope.collectors.host.gpu.maps import (
    NVML_NVLINK_COUNTERS,
    NVML_READS,
    NVML_REMAPPED_FIELDS,
    NVML_RETIRED_CAUSES,
    throttle_reasons,
)
from fabricscope.core.model import Event, Sample, now

log = logging.getLogger("fabricscope.agent.gpu")
# Tried in order: the name since driver 535, then the older (same bits).
_THROTTLE_CALLS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
_NO_GPU_ERRORS = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_NO_PERMISSION")


def load_nvml() -> Any | None:
    """The ``pynvml`` module, or None (logged once at INFO) where the binding is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        log.info("gpu: NVML bindings not installed (pip install 'fabricscope[gpu]'); GPU collector off")
        return None


class NvmlCollector:
    name = "gpu"

    def __init__(self, host: str, lib: Any, *, emit: Callable[[Event], None] | None = None) -> None:
        self.host, self.lib = host, lib
        self.emit = emit or (lambda _e: None)
        self.handles: list[Any] = []
        self._unsupported: set[tuple[int, str]] = set()
        self._events: Any = None

    @classmethod
    def open(cls, host: str, lib: Any = None, *, emit: Callable[[Event], None] | None = None) -> NvmlCollector | None:
        """Initialise NVML and find the GPUs; None (logged, no exception) where that is impossible."""
        lib = lib if lib is not None else load_nvml()
        if lib is None:
            return None
        try:
            lib.nvmlInit()
        except lib.NVMLError as exc:
            no_gpu = getattr(exc, "value", None) in {getattr(lib, n, None) for n in _NO_GPU_ERRORS}
            log.log(logging.INFO if no_gpu else logging.WARNING,
                    "gpu %s: NVML unavailable (%s); GPU collector off", host, exc)
            return None
        col = cls(host, lib, emit=emit)
        try:
            col.handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(lib.nvmlDeviceGetCount())]
        except lib.NVMLError as exc:
            log.warning("gpu %s: cannot list GPUs (%s); GPU collector off", host, exc)
            return None
        col.watch_xid()
        log.info("gpu %s: NVML %d GPU(s)", host, len(col.handles))
        return col

    def watch_xid(self) -> None:
        lib = self.lib
        try:
            self._events = lib.nvmlEventSetCreate()
        except lib.NVMLError as exc:
            log.info("gpu %s: no NVML event set (%s): XID events off", self.host, exc)
            return
        for i, h in enumerate(self.handles):
            try:
                lib.nvmlDeviceRegisterEvents(h, lib.nvmlEventTypeXidCriticalError, self._events)
            except lib.NVMLError as exc:
                log.info("gpu %s:gpu%d: XID events not supported (%s)", self.host, i, exc)

    def _call(self, index: int, key: str, fn: str, *args: Any) -> Any:
        """``lib.fn(*args)``, or None when NVML refuses (unsupported calls are not retried)."""
        call = None if (index, key) in self._unsupported else getattr(self.lib, fn, None)
        if call is None:
            return None  # unsupported on this GPU, or a pynvml too old to know the call
        try:
            return call(*args)
        except self.lib.NVMLError as exc:
            if getattr(exc, "value", None) == getattr(self.lib, "NVML_ERROR_NOT_SUPPORTED", object()):
                self._unsupported.add((index, key))
            else:
                log.debug("gpu %s:gpu%d: %s failed: %s", self.host, index, fn, exc)
            return None

    def gpu_samples(self, index: int, handle: Any, ts: float) -> list[Sample]:
        lib, src = self.lib, f"{self.host}:gpu{index}"
        out: list[Sample] = []

        def add(metric: str, value: Any, labels: dict[str, str] | None = None) -> None:
            if value is not None:
                out.append(Sample(ts, src, metric, float(value), labels or None))

        for r in NVML_READS:
            got = self._call(index, r.call + repr(r.args), r.call, handle, *(getattr(lib, a) for a in r.args))
            if got is not None and r.attr is not None:
                got = getattr(got, r.attr, None)
            add(r.metric, None if got is None else got * r.scale, dict(r.labels))
        mask = next((m for fn in _THROTTLE_CALLS if (m := self._call(index, "throttle", fn, handle)) is not None),
                    None)
        if mask is not None:
            for reason, active in throttle_reasons(int(mask)).items():
                add("gpu_throttle_active", active, {"reason": reason})
        for const, cause in NVML_RETIRED_CAUSES.items():
            pages = self._call(index, const, "nvmlDeviceGetRetiredPages", handle, getattr(lib, const))
            add("gpu_retired_pages_total", None if pages is None else len(pages), {"cause": cause})
        rows = self._call(index, "remapped", "nvmlDeviceGetRemappedRows", handle)
        for pos, cause in NVML_REMAPPED_FIELDS.items():
            add("gpu_remapped_rows_total", None if rows is None else rows[pos], {"cause": cause})
        out += self.nvlink_samples(index, handle, ts, src)
        return out

    def nvlink_samples(self, index: int, handle: Any, ts: float, src: str) -> list[Sample]:
        lib, out = self.lib, list[Sample]()
        for link in range(getattr(lib, "NVML_NVLINK_MAX_LINKS", 0)):
            state = self._call(index, "nvlink" if link == 0 else f"nvlink{link}", "nvmlDeviceGetNvLinkState",
                               handle, link)
            if state is None:
                break  # no NVLink, or past this GPU's last link
            if state != getattr(lib, "NVML_FEATURE_ENABLED", 1):
                continue
            for const, kind in NVML_NVLINK_COUNTERS.items():
                n = self._call(index, f"{const}{link}", "nvmlDeviceGetNvLinkErrorCounter", handle, link,
                               getattr(lib, const))
                if n is not None:
                    out.append(Sample(ts, src, "gpu_nvlink_errors_total", float(n), {"type": kind, "link": str(link)}))
        return out

    def drain_xid(self) -> list[Event]:
        """Every XID the event set holds now; ``timeoutms=0`` so this never waits."""
        lib, out = self.lib, list[Event]()
        if self._events is None:
            return out
        while True:
            try:
                data = lib.nvmlEventSetWait(self._events, 0)
            except lib.NVMLError:
                break  # NVML_ERROR_TIMEOUT: nothing pending (any other error: try again next poll)
            try:
                index = lib.nvmlDeviceGetIndex(data.device)
            except lib.NVMLError:
                index = -1
            source = f"{self.host}:gpu{index}" if index >= 0 else f"{self.host}:gpu"
            out.append(Event("gpu_xid", source, now(), attrs={"code": int(data.eventData)}))
        return out

    def poll(self) -> list[Sample]:
        for event in self.drain_xid():
            log.warning("gpu %s: XID %s", event.source, event.attrs["code"])
            self.emit(event)
        ts = now()
        out: list[Sample] = []
        for index, handle in enumerate(self.handles):
            out += self.gpu_samples(index, handle, ts)
        return out

    def close(self) -> None:
        try:
            if self._events is not None:
                self.lib.nvmlEventSetFree(self._events)
            self.lib.nvmlShutdown()
        except self.lib.NVMLError as exc:
            log.debug("gpu %s: NVML shutdown: %s", self.host, exc)
