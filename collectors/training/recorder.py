"""The training-side recorder: steps, phases, checkpoints and collectives of one rank.

Three lines instrument a script::

    from fabricscope.collectors.training import Recorder
    rec = Recorder().start()                 # FABRICSCOPE_URL, FABRICSCOPE_JOB from the environment
    with rec.step(n): ...                    # around each training step

Contract with the training loop: nothing here raises into it and nothing blocks it. Records are
handed to a background :class:`~collectors.sinks.http.HttpSender` (bounded queue, retries, spool);
any internal error is counted in ``stats["errors"]`` and otherwise ignored. Without a URL the
recorder is a no-op. Timestamps posted are wall clock, durations come from ``perf_counter``: each
step re-anchors the monotonic clock to ``time.time()`` once, so a step costs one wall-clock read.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import re
import socket
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from fabricscope.collectors.sinks.http import HttpSender
from fabricscope.collectors.sinks.sender import Sender
from fabricscope.collectors.training import farewell, joblabels, lastwords, placement, volume
from fabricscope.collectors.training.collectives import CollectiveTimer, ddp_comm_hook
from fabricscope.collectors.training.flight import DEFAULT_BUFFER, FlightReader
from fabricscope.collectors.training.lastwords import LastWords
from fabricscope.core.redact import redact_url

log = logging.getLogger("fabricscope.training")


class _Null:
    """What a disabled recorder hands out: a context manager and mark that does nothing."""

    bytes: int | None = None

    def __enter__(self) -> _Null:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NULL = _Null()


class _Step:
    __slots__ = ("n", "rec")

    def __init__(self, rec: Recorder, n: int) -> None:
        self.rec, self.n = rec, n

    def __enter__(self) -> _Step:
        self.rec.step_begin(self.n)
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.rec.step_end(completed=exc_type is None)


class _PhaseEnd:
    __slots__ = ("rec",)

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec

    def __enter__(self) -> _PhaseEnd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.rec.phase_end()


class _Checkpoint:
    """``with rec.checkpoint(path) as ck: save(...); ck.bytes = n`` (bytes optional if path exists)."""

    def __init__(self, rec: Recorder, path: str | None) -> None:
        self.rec, self.path, self.bytes = rec, path, None

    def __enter__(self) -> _Checkpoint:
        self.rec.checkpoint_begin(self.path)
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.rec.checkpoint_end(self.bytes, failed=exc_type is not None)


def _unreachable_job(job: str) -> bool:
    return job in (".", "..") or any(ch == "/" or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in job)


def _env_int(env: Any, *names: str) -> int | None:
    for n in names:
        v = env.get(n, "")
        if v.strip().isdigit():
            return int(v)
    return None


class Recorder:
    """One per training process. Arguments override the ``FABRICSCOPE_*`` environment."""

    def __init__(
        self,
        url: str | None = None,
        job: str | None = None,
        *,
        token: str | None = None,
        rank: int | None = None,
        local_rank: int | None = None,
        host: str | None = None,
        gpu: str | None = None,
        nic: str | None = None,
        spool: str | Path | None = None,
        labels: dict[str, str] | None = None,
        collectives: bool | None = None,
        job_labels: bool | None = None,
        sysfs_root: str | Path = "/sys",
        env: Any = None,
        sender: Sender | None = None,
        exit_timeout_s: float = 5.0,
        **sender_options: Any,
    ) -> None:
        env = os.environ if env is None else env
        self.url = url or env.get("FABRICSCOPE_URL") or None
        # torchrun and Slurm give every rank the same run id: a sane default job name.
        self.job: str | None = (job or env.get("FABRICSCOPE_JOB") or env.get("TORCHELASTIC_RUN_ID")
                                or env.get("SLURM_JOB_ID") or None)
        self.enabled = bool((self.url or sender) and self.job)
        if not self.enabled and (self.url or self.job):
            log.warning("fabricscope: recorder disabled: both a URL and a job name are needed")
        elif self.job is not None and _unreachable_job(self.job):
            # The service refuses such a name (it is the {job} segment of every job URL): say so now,
            # once, instead of having every batch of the run rejected.
            log.error("fabricscope: recorder disabled: job name %r has a '/' or a control character, or is "
                      "'.' or '..'; the service refuses it (set FABRICSCOPE_JOB to another name)", self.job)
            self.enabled = False
        self._token = token or env.get("FABRICSCOPE_TOKEN") or None
        self._spool_dir = spool or env.get("FABRICSCOPE_SPOOL") or (
            Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fabricscope" / "spool")
        self._rank = rank if rank is not None else _env_int(env, "RANK", "FABRICSCOPE_RANK")
        self._local_rank = local_rank if local_rank is not None else _env_int(env, "LOCAL_RANK")
        self._host, self._gpu, self._nic = host, gpu, nic
        self._labels = labels
        # versions, world size and parallelism sizes as job labels (collectors/training/joblabels.py)
        self._job_labels = job_labels if job_labels is not None else env.get("FABRICSCOPE_JOB_LABELS", "1") != "0"
        self._sysfs_root = sysfs_root
        self._env = env
        self._sender = sender
        self._sender_options = sender_options
        self._exit_timeout = exit_timeout_s
        want = collectives if collectives is not None else env.get("FABRICSCOPE_COLLECTIVES", "1") != "0"
        self._want_collectives = want
        # The Flight Recorder as the collective source where torch has it (flight.py), opt-in with
        # FABRICSCOPE_FLIGHT=1: on CPU/gloo its reader thread costs ~93 us of CPU per collective (torch
        # dumps the whole ring each read) and nothing is saved on the training thread, and the GPU
        # figures are not measured yet (docs/training-hook.md)
        self._want_flight = want and env.get("FABRICSCOPE_FLIGHT", "0") == "1"
        self._flight_interval = _env_float(env, "FABRICSCOPE_FLIGHT_INTERVAL_S", 2.0)
        self._flight: FlightReader | None = None
        # #45 item 3: "bounded" sends a summary per step and full records only for slow, requested and
        # sampled steps (volume.py); "all" (the default until its accuracy is shown end to end) every record
        mode = env.get("FABRICSCOPE_COLLECTIVE_DETAIL", "all") or "all"
        if mode not in volume.MODES:
            log.warning("fabricscope: FABRICSCOPE_COLLECTIVE_DETAIL=%r is not one of %s; 'all' used", mode,
                        ", ".join(volume.MODES))
        self._volume_settings = volume.VolumeSettings.from_env(env) if mode == "bounded" else None
        self._volume: volume.BoundedDetail | None = None
        self._bounds: deque[tuple[int, float, float]] = deque(maxlen=512)  # (step, wall start, wall end)
        self.collectives_on = False
        self.cuda_on = False
        self.wall_offset = time.time() - time.perf_counter()
        self._timer_obj: CollectiveTimer | None = None
        self._registered = False
        self._started = False
        self._closed = False
        self._lock = threading.Lock()
        self._errors = 0
        self._drops = 0
        self._step: int | None = None
        self._step_t0 = 0.0
        self._phases: dict[str, float] = {}
        self._phase: str | None = None
        self._phase_t0 = 0.0
        self._phase_end = _PhaseEnd(self)
        self._ckpt: tuple[float, str | None, int | None] | None = None
        self._lastwords: LastWords | None = None
        self._farewell: farewell.Farewell | None = None
        if self._sender is not None and self.enabled:
            self._start_volume(self._sender)

    def __repr__(self) -> str:  # the token never appears
        url = redact_url(self.url) if self.url else None
        return f"Recorder(url={url!r}, job={self.job!r}, rank={self._rank!r}, enabled={self.enabled})"

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> Recorder:
        """Hook collectives, register rank placement when the rank is known, flush at exit."""
        if not self.enabled or self._started:
            return self
        self._started = True
        try:
            if self._want_flight and self._env is os.environ:
                # Read by torch when a process group is created: the ring's size, and NCCL's own
                # collective timing (docs/training-hook.md: its cost). A value the user set stays.
                os.environ.setdefault("TORCH_FR_BUFFER_SIZE", DEFAULT_BUFFER)
                os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
            self._maybe_hook()
            if self._env.get("FABRICSCOPE_INFLIGHT_S", "") != "0":  # in-flight notices for hangs (#45)
                self._lastwords = LastWords(self, interval_s=_env_float(
                    self._env, "FABRICSCOPE_INFLIGHT_S", lastwords.DEFAULT_INTERVAL_S)).start()
            if self._rank_known():
                self._register()
            term_s = _env_float(self._env, "FABRICSCOPE_TERM_FLUSH_S", farewell.DEFAULT_FLUSH_S)
            if term_s > 0 and self._env is os.environ:  # the final dump on SIGTERM (farewell.py)
                fw = farewell.Farewell(self._final_dump, timeout_s=term_s, on_signal=self._signalled)
                self._farewell = fw if fw.install() else None
            atexit.register(self.close)
            import multiprocessing.util as mpu

            # fork-started children skip atexit; multiprocessing finalizers still run there.
            mpu.Finalize(self, Recorder.close, args=(self,), exitpriority=10)
        except Exception as e:
            self._errors += 1
            log.warning("fabricscope: start incomplete: %s", e)
        return self

    def close(self, timeout_s: float | None = None) -> None:
        """Resolve pending CUDA timings, send or spool what is queued. Idempotent."""
        if self._closed or not self.enabled:
            return
        self._closed = True
        self.collectives_on = False
        try:
            if self._farewell is not None:
                self._farewell.uninstall()
            if self._lastwords is not None:
                self._lastwords.stop()
            if not self._registered and self._started:
                self._register()
            if self._flight is not None:
                self._flight.stop(final=True)
            t = self._timer_obj
            if t is not None:
                if t.cuda.pending() and self.cuda_on:
                    t.torch.cuda.synchronize()  # at exit a sync costs nothing to training
                t.resolve()
                t._stop.set()
            if self._volume is not None:
                self._volume.tick(final=True, closing=True)
            if self._sender is not None:
                self._sender.close(self._exit_timeout if timeout_s is None else timeout_s)
        except Exception as e:
            log.warning("fabricscope: close: %s", e)

    def _signalled(self) -> None:
        """SIGTERM reached Python (main thread): a close the program's own handler makes from here on
        says so in its rank_exit, whether or not the final dump's thread has started."""
        if self._lastwords is not None:
            self._lastwords.signalled("SIGTERM")

    def _final_dump(self, dying: bool, timeout_s: float) -> None:
        """On SIGTERM, from farewell.py's thread (never the training thread): what the rank is inside,
        the records ready now, then the queue sent, or spooled when ``dying`` and the service is slow.
        No CUDA sync: a GPU stuck in a collective would never return from it."""
        try:
            if self._lastwords is not None:
                self._lastwords.final("SIGTERM")
            if self._timer_obj is not None:
                self._timer_obj.resolve()
            if self._flight is not None:
                self._flight.poll(final=dying)
            if self._volume is not None:
                self._volume.tick(final=True, closing=dying)
            if dying:
                self._closed = True
                self.collectives_on = False
                if self._lastwords is not None:
                    self._lastwords.stop()  # rank_exit {rank, signal}
                if self._sender is not None:
                    self._sender.close(timeout_s)
            elif self._sender is not None:
                self._sender.flush(timeout_s)
        except Exception as e:
            self._errors += 1
            log.warning("fabricscope: final dump on SIGTERM incomplete: %s", e)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Push out what is queued now; True when it all reached the service."""
        try:
            if self._timer_obj is not None:
                self._timer_obj.resolve()
            if self._flight is not None:
                self._flight.poll()
            if self._volume is not None:
                self._volume.tick(final=True)
            return self._sender.flush(timeout_s) if self._sender is not None else True
        except Exception:
            return False

    @property
    def stats(self) -> dict[str, int]:
        out = dict(self._sender.stats) if self._sender is not None else {}
        t = self._timer_obj
        fr = self._flight
        out["collectives_recorded"] = (t.recorded if t else 0) + (fr.recorded if fr else 0)
        out["errors"] = self._errors + (t.errors if t else 0) + (fr.errors if fr else 0)
        if t is not None and self.cuda_on:  # CUDA ops left untimed because their device's event pool was dry
            out["cuda_untimed"] = t.cuda.untimed
        if fr is not None:  # entries lost to the ring wrapping, ops posted under the ring's own name
            out["flight_missed"], out["flight_unmapped"] = fr.missed, fr.unmapped
        out["dropped"] = out.get("dropped", 0) + self._drops
        if self._volume is not None:
            out.update(self._volume.stats)
        return out

    # -- steps and phases ---------------------------------------------------------------------------
    def step(self, n: int) -> _Step | _Null:
        return _Step(self, n) if self.enabled else _NULL

    def step_begin(self, n: int) -> None:
        if not self.enabled:
            return
        try:
            now = time.perf_counter()
            self.wall_offset = time.time() - now
            if not self._started:
                self.start()  # a forgotten start(): hook and flush at exit all the same
            elif self._timer_obj is None:
                self._maybe_hook()
            if not self._registered:
                self._register()
            self._step = int(n)
            self._bounds.append((self._step, now + self.wall_offset, math.inf))
            self._phases = {}
            self._phase = None
            self._step_t0 = time.perf_counter()
        except Exception:
            self._errors += 1

    def step_end(self, completed: bool = True) -> None:
        """Post the step (a step left by an exception is not a step and is not posted)."""
        if not self.enabled or self._step is None:
            return
        try:
            t1 = time.perf_counter()
            self._close_phase(t1)
            off = self.wall_offset
            rec: dict[str, Any] = {"rank": self.rank, "step": self._step,
                                   "start": self._step_t0 + off, "end": t1 + off}
            if self._phases:
                rec["phases"] = self._phases
            self._step = None
            if self._bounds and self._bounds[-1][0] == rec["step"]:
                self._bounds[-1] = (rec["step"], rec["start"], rec["end"])
            if completed:
                self._submit("steps", rec)
            if self._volume is not None:
                self._volume.step_done(rec["step"], rec["start"], rec["end"], completed)
        except Exception:
            self._errors += 1

    def phase(self, name: str) -> _PhaseEnd | _Null:
        """Mark that phase ``name`` starts now (the running one ends). As a context manager the
        phase also ends with the block. Seconds per phase are summed into the step record."""
        if not self.enabled:
            return _NULL
        try:
            now = time.perf_counter()
            self._close_phase(now)
            self._phase, self._phase_t0 = name, now
        except Exception:
            self._errors += 1
        return self._phase_end

    def phase_end(self) -> None:
        try:
            self._close_phase(time.perf_counter())
        except Exception:
            self._errors += 1

    def _close_phase(self, now: float) -> None:
        if self._phase is not None:
            if self._step is not None:
                self._phases[self._phase] = self._phases.get(self._phase, 0.0) + (now - self._phase_t0)
            self._phase = None

    # -- checkpoints --------------------------------------------------------------------------------
    def checkpoint(self, path: str | os.PathLike[str] | None = None) -> _Checkpoint | _Null:
        return _Checkpoint(self, os.fspath(path) if path is not None else None) if self.enabled else _NULL

    def checkpoint_begin(self, path: str | os.PathLike[str] | None = None) -> None:
        if not self.enabled:
            return
        try:
            p = os.fspath(path) if path is not None else None
            self._ckpt = (time.perf_counter(), p, self._step)
            if self._step is not None:
                self.phase("checkpoint")
        except Exception:
            self._errors += 1

    def checkpoint_end(self, bytes: int | None = None, *, failed: bool = False) -> None:  # noqa: A002
        """Post a ``checkpoint`` event; ``bytes`` defaults to the size of what is at the path."""
        if not self.enabled or self._ckpt is None:
            return
        try:
            t1 = time.perf_counter()
            t0, path, step = self._ckpt
            self._ckpt = None
            if self._phase == "checkpoint":
                self._close_phase(t1)
            if bytes is None and path is not None and not failed:
                bytes = _size_of(path)
            off = self.wall_offset
            host = self._host or self._env.get("FABRICSCOPE_HOST") or socket.gethostname()
            attrs: dict[str, Any] = {"rank": self.rank}
            if bytes is not None:
                attrs["bytes"] = int(bytes)
            if path is not None:
                attrs["path"] = path
            if step is not None:
                attrs["step"] = step
            if failed:
                attrs["failed"] = True
            ev = {"kind": "checkpoint", "source": f"{host}:{_mount_point(path)}" if path else host,
                  "start": t0 + off, "end": t1 + off, "attrs": attrs}
            self._submit("events", ev)
        except Exception:
            self._errors += 1

    # -- collectives --------------------------------------------------------------------------------
    def ddp_comm_hook(self, inner: Any = None) -> Any:
        """``ddp.register_comm_hook(pg_or_None, rec.ddp_comm_hook())``: times gradient buckets."""
        return ddp_comm_hook(self, inner)

    def name_group(self, group: Any, name: str) -> None:
        """Post collectives of ``group`` under ``name`` (e.g. ``dp0``, ``tp3``)."""
        t = self._timer()
        if t is not None:
            t.name_group(group, name)

    def record_collective(self, op: str, start: float, end: float, *, bytes: int | None = None,  # noqa: A002
                          group: str | None = None, group_size: int | None = None,
                          seq: int | None = None) -> None:
        """Post a collective timed by other means (wall-clock ``start``/``end``)."""
        if not self.enabled:
            return
        try:
            meta = self._collective_meta(op, seq, bytes, group, group_size)
            meta["start"], meta["end"] = start, end
            self._submit("collectives", meta)
        except Exception:
            self._errors += 1

    def _collective_meta(self, op: str, seq: int | None, nbytes: int | None, group: str | None,
                         group_size: int | None) -> dict[str, Any]:
        m: dict[str, Any] = {"rank": self._rank if self._rank is not None else self.rank, "op": op}
        if seq is not None:
            m["seq"] = seq
        if nbytes is not None:
            m["bytes"] = nbytes
        if group is not None:
            m["group"] = group
        if group_size is not None:
            m["group_size"] = group_size
        if self._step is not None:
            m["step"] = self._step
        return m

    def _maybe_hook(self) -> None:
        # Only once the script has imported torch itself: the hook never pulls torch in.
        if self._want_collectives and "torch" in sys.modules:
            self._timer()

    def _timer(self) -> CollectiveTimer | None:
        if self._timer_obj is None and self.enabled:
            t = CollectiveTimer(self)
            if t.install():
                self._timer_obj = t
                self.collectives_on = True
                try:
                    self.cuda_on = bool(t.torch.cuda.is_available())
                    if self.cuda_on and t.torch.cuda.is_initialized():
                        t.anchor_cuda()
                except Exception:
                    self.cuda_on = False
                if self._want_flight:
                    self._start_flight(t)
        return self._timer_obj

    def _start_flight(self, t: CollectiveTimer) -> None:
        dump = getattr(getattr(t.torch._C, "_distributed_c10d", None), "_dump_fr_trace_json", None)
        if dump is None:
            return  # a torch without the Flight Recorder: the wrapper times everything
        try:
            fr = FlightReader(lambda: dump(includeCollectives=True), lambda r: self._submit("collectives", r),
                              rank=lambda: self.rank, step_of=self._step_of, alias=t.aliases_by_name.get,
                              sizes=_group_sizes, interval_s=self._flight_interval)
            fr.start()
            self._flight = t.flight = fr
        except Exception as e:
            self._errors += 1
            log.warning("fabricscope: flight recorder not read: %s", e)

    def _step_of(self, wall: float) -> int | None:
        for n, start, end in reversed(list(self._bounds)):
            if start <= wall <= end:
                return n
            if end < wall:
                return None  # between steps
        return None

    # -- rank, placement, sending -------------------------------------------------------------------
    @property
    def rank(self) -> int:
        if self._rank is None:
            dist = sys.modules.get("torch.distributed")
            try:
                if dist is not None and dist.is_available() and dist.is_initialized():
                    self._rank = int(dist.get_rank())
            except Exception:
                pass
        return self._rank if self._rank is not None else 0

    def _rank_known(self) -> bool:
        self.rank  # noqa: B018 - resolves from torch.distributed when it is initialised
        return self._rank is not None

    def _register(self) -> None:
        """``PUT /v1/jobs/{job}`` with this rank's placement (once)."""
        try:
            gpu_name, gpu_pci = placement.gpu_of_this_process(self._env)
            t = self._timer_obj
            if t is not None and self.cuda_on and t._anchor is None and t.torch.cuda.is_initialized():
                t.anchor_cuda()  # the first step: the one device sync this hook ever adds
            entry = placement.detect(self.rank, local_rank=self._local_rank, host=self._host,
                                     gpu=self._gpu or gpu_name, gpu_pci=gpu_pci, nic=self._nic,
                                     env=self._env, sysfs_root=self._sysfs_root)
            loc = placement.locality(entry, gpu_pci=gpu_pci, env=self._env, sysfs_root=self._sysfs_root)
            if loc:  # #17: GPU-to-NIC locality for GET /v1/jobs/{job}/placement
                entry["locality"] = loc
            body: dict[str, Any] = {"ranks": [entry]}
            labels = joblabels.merged(joblabels.detect(self._env) if self._job_labels else {}, self._labels)
            if labels:
                body["labels"] = labels
            s = self._get_sender()
            if s is not None:
                s.put_job(self.job or "", body)
            self._registered = True
        except Exception as e:
            self._errors += 1
            self._registered = True  # do not retry on every step
            log.warning("fabricscope: rank placement not registered: %s", e)

    def _get_sender(self) -> Sender | None:
        if self._sender is None and self.enabled and not self._closed:
            with self._lock:
                if self._sender is None:
                    spool_file = None
                    if self._spool_dir:
                        who = f"rank{self._rank}" if self._rank_known() else f"pid{os.getpid()}"
                        job = re.sub(r"[^A-Za-z0-9_.-]", "_", self.job or "job")
                        spool_file = Path(self._spool_dir) / f"{job}.{who}.jsonl"
                    self._sender = HttpSender(self.url or "", token=self._token, spool_path=spool_file,
                                              **self._sender_options)
                    self._start_volume(self._sender)
        return self._sender

    def _start_volume(self, sender: Sender) -> None:
        if self._volume_settings is None or self._volume is not None:
            return
        poll = volume.http_poll(getattr(sender, "transport", None), self.job or "", lambda: self.rank)
        self._volume = volume.BoundedDetail(self._volume_settings, lambda kind, item: self._send(kind, item),
                                            lambda: self.rank, lambda: volume.world_size(self._env), poll)
        on_tick = getattr(sender, "on_tick", None)
        if on_tick is not None:
            on_tick(self._volume.tick)

    def _submit(self, kind: str, item: dict[str, Any]) -> None:
        s = self._sender if self._sender is not None else self._get_sender()
        if kind == "collectives" and self._volume is not None:
            self._volume.add(item)  # bounded detail: the sender thread decides what goes out
        elif s is not None:
            s.submit(kind, item, job=self.job)

    def _send(self, kind: str, item: dict[str, Any]) -> None:
        if self._sender is not None:
            self._sender.submit(kind, item, job=self.job)

    def _count_drop(self, n: int) -> None:
        self._drops += n


def _env_float(env: Any, name: str, default: float) -> float:
    try:
        return float(env.get(name, "") or default)
    except ValueError:
        log.warning("fabricscope: %s=%r is not a number; %s used", name, env.get(name), default)
        return default


def _group_sizes() -> dict[str, int]:
    """group_name -> size of every process group this process knows (the ring names groups only)."""
    from torch.distributed import distributed_c10d as c10d

    out = {}
    for pg, name in dict(c10d._world.pg_names).items():
        try:
            out[str(name)] = int(pg.size())
        except Exception:
            continue
    return out


def _size_of(path: str) -> int | None:
    """Bytes at ``path``: a file's size or a directory tree's total (sharded checkpoints)."""
    try:
        p = Path(path)
        if p.is_file():
            return p.stat().st_size
        if p.is_dir():
            return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    except OSError:
        pass
    return None


def _mount_point(path: str) -> str:
    """The mount point holding ``path`` (``/mnt/ckpt``), the volume the storage collectors name."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        while not os.path.ismount(p) and p != p.parent:
            p = p.parent
    except OSError:
        pass
    return str(p)
