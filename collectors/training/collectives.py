"""Automatic timing of ``torch.distributed`` collectives, sync and ``async_op=True``.

The functions in the ``torch.distributed`` namespace are replaced by thin wrappers (the originals
are kept and restored by ``uninstall``). Code that looks them up there at call time, as FSDP and the
DDP default comm hooks do, is covered; a name bound with ``from torch.distributed import all_reduce``
before ``install`` is not. DDP's own bucketed all-reduces run in C++ and are caught with
:func:`ddp_comm_hook` instead.

What is timed, per call: op, bytes of this rank's input, group name and size, a per-group sequence
number (collectives run in the same order on every member, so ``(group, seq)`` names one collective
across ranks), and the training step it was issued in.

- CPU tensors (gloo): monotonic clock around the call; an async op ends when its future completes
  (a callback, no extra thread), or when ``wait()`` returns where the backend has no future.
- CUDA tensors: two pooled CUDA events around the work on the current stream and one tuple in a
  ring; a daemon thread resolves them per stream in issue order with ``query()``/``elapsed_time``
  (no device sync in the training loop; cudatiming.py). Wall times come from one anchor event
  synchronised once when the recorder starts timing CUDA.

torch is imported only by ``install`` (the recorder calls it lazily).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
import threading
import time
from typing import Any, Protocol

from fabricscope.collectors.training.cudatiming import DRY, CudaTiming


class Recorder(Protocol):
    """What the timers use of :class:`fabricscope.collectors.training.recorder.Recorder`: a protocol,
    so that this module does not import the recorder, which imports it (no import cycle)."""

    collectives_on: bool
    cuda_on: bool
    wall_offset: float
    _step: int | None

    def _collective_meta(self, op: str, seq: int | None, nbytes: int | None, group: str | None,
                         group_size: int | None) -> dict[str, Any]: ...
    def _submit(self, kind: str, item: dict[str, Any]) -> None: ...
    def _count_drop(self, n: int) -> None: ...
    def _timer(self) -> Any: ...


log = logging.getLogger("fabricscope.training")

# name in torch.distributed -> (op as posted, parameters whose tensors count as this rank's bytes)
SPECS: dict[str, tuple[str, tuple[str, ...]]] = {
    "all_reduce": ("all_reduce", ("tensor",)),
    "broadcast": ("broadcast", ("tensor",)),
    "reduce": ("reduce", ("tensor",)),
    "all_gather": ("all_gather", ("tensor",)),
    "all_gather_into_tensor": ("all_gather_into_tensor", ("input_tensor",)),
    "all_gather_single": ("all_gather_into_tensor", ("input_tensor",)),  # its newer name (2.13)
    "reduce_scatter": ("reduce_scatter", ("input_list",)),
    "reduce_scatter_tensor": ("reduce_scatter_tensor", ("input",)),
    "reduce_scatter_single": ("reduce_scatter_tensor", ("input",)),
    "all_to_all": ("all_to_all", ("input_tensor_list",)),
    "all_to_all_single": ("all_to_all_single", ("input",)),
    "barrier": ("barrier", ()),
    "send": ("send", ("tensor",)),
    "recv": ("recv", ("tensor",)),
    "isend": ("send", ("tensor",)),
    "irecv": ("recv", ("tensor",)),
}
_ALWAYS_ASYNC = frozenset({"isend", "irecv"})
# Point-to-point ops: numbered per (group, direction, peer), not in the group's collective sequence
# (ranks that are not the peer never see them, and would fall out of step).
_PEER_PARAM = {"send": "dst", "isend": "dst", "recv": "src", "irecv": "src"}
# Sync CPU collectives: one tuple each in a preallocated ring, made into records by the resolver thread
# (#45 item 2: no dict and no sender queue on the training thread). Full ring: the op is dropped, counted.
_RING = 1 << 16


def nbytes(obj: Any) -> int:
    """Bytes of a tensor or of a list of tensors (0 for anything else)."""
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(t) for t in obj)
    try:
        return int(obj.numel()) * int(obj.element_size())
    except AttributeError:
        return 0


class _Group:
    __slots__ = ("name", "p2p", "pg", "raw", "seq", "size")

    def __init__(self, pg: Any, name: str, size: int | None) -> None:
        self.pg, self.name, self.size, self.seq = pg, name, size, 0
        self.raw = str(getattr(pg, "group_name", "") or "")  # the Flight Recorder's name for it
        self.p2p: dict[tuple[str, Any], int] = {}


class TimedWork:
    """A Work whose ``wait()`` (or first ``is_completed()`` that says yes) closes its record.

    Used where a backend's Work has no future, and for CUDA async ops (the end event must be
    recorded after ``wait()`` has made the current stream wait for the collective).
    """

    __slots__ = ("_done", "_needs_wait", "_on_done", "_work")

    def __init__(self, work: Any, on_done: Any) -> None:
        self._work, self._on_done, self._done = work, on_done, False
        self._needs_wait = getattr(on_done, "needs_wait", False)

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._on_done()

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        out = self._work.wait(*args, **kwargs)
        self._finish()
        return out

    def is_completed(self) -> bool:
        done = bool(self._work.is_completed())
        if done and not self._needs_wait:
            self._finish()
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


class CollectiveTimer:
    """Owns the wrappers, the per-group sequence numbers and the CUDA event resolver."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.dist: Any = None
        self.torch: Any = None
        self.originals: dict[str, Any] = {}
        self.groups: dict[int, _Group] = {}
        self.aliases: dict[int, str] = {}
        self.aliases_by_name: dict[str, str] = {}  # the same aliases, by group_name (Flight Recorder)
        self.flight: Any = None  # a FlightReader when the Flight Recorder is the source (flight.py)
        self.tls = threading.local()
        self.errors = 0
        self.recorded = 0
        self.cuda = CudaTiming(self)  # pooled events, a tuple ring, resolution in stream order
        self._resolver: threading.Thread | None = None
        self._anchor: tuple[Any, float] | None = None  # (CUDA event, wall time it completed)
        self._stop = threading.Event()
        self.inflight: tuple[Any, ...] | None = None  # (spec, args, kwargs, t0) of the call in progress
        self._ring: list[tuple[Any, ...] | None] = [None] * _RING
        self._ticket = itertools.count()  # next() is atomic under the GIL: one ticket per call, any thread
        self._read = 0  # the next ticket the resolver makes a record of; slot = ticket % _RING
        self._skipped: set[int] = set()  # tickets dropped on a full ring: the resolver steps over them
        self._drain_lock = threading.Lock()  # the resolver, flush() and close() drain; the loop never waits
        self._start_lock = threading.Lock()
        self.ring_dropped = 0

    # -- install / uninstall -----------------------------------------------------------------------
    def install(self) -> bool:
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            return False
        if not dist.is_available():
            return False
        self.torch, self.dist = torch, dist
        for name, (op, tensor_params) in SPECS.items():
            fn = getattr(dist, name, None)
            if fn is None or name in self.originals:
                continue
            original = getattr(fn, "__fabricscope_original__", fn)  # never wrap a wrapper
            setattr(dist, name, self._wrap(name, op, original, tensor_params))
            self.originals[name] = original
        return True

    def uninstall(self) -> None:
        for name, fn in self.originals.items():
            setattr(self.dist, name, fn)
        self.originals.clear()
        self._stop.set()

    def _wrap(self, name: str, op: str, fn: Any, tensor_params: tuple[str, ...]) -> Any:
        params = list(inspect.signature(fn).parameters)
        t_pos = [(params.index(p), p) for p in tensor_params if p in params]
        g_pos = params.index("group") if "group" in params else -1
        a_pos = params.index("async_op") if "async_op" in params else -1
        always_async = name in _ALWAYS_ASYNC
        peer = _PEER_PARAM.get(name)
        p_pos = params.index(peer) if peer in params else -1
        spec = (op, t_pos, g_pos, a_pos, always_async, peer, p_pos)
        perf = time.perf_counter
        rec, tls, done = self.rec, self.tls, self._done

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not rec.collectives_on or getattr(tls, "suppress", False):
                return fn(*args, **kwargs)
            flight = self.flight
            if flight is not None and peer is None and not flight.disabled:
                if rec.cuda_on:  # the ring has NCCL's own timing: nothing to do on this thread
                    return fn(*args, **kwargs)
                try:  # the slot is listed before the call: the reader may see the entry retire first
                    slot = self._flight_slot(flight, spec, args, kwargs, perf())
                except Exception:
                    self.errors += 1
                    return fn(*args, **kwargs)
                self.inflight = (spec, args, kwargs, perf())  # lastwords.py: a rank blocked in here
                try:
                    res = fn(*args, **kwargs)
                except BaseException:
                    slot[3] = slot[4] = perf() + rec.wall_offset
                    raise
                finally:
                    self.inflight = None
                try:
                    return self._flight_end(slot, spec, args, kwargs, perf(), res)
                except Exception:
                    self.errors += 1
                    return res
            cuda = self._cuda_start(args, kwargs, t_pos) if rec.cuda_on else None
            t0 = perf()
            # one slot, read by collectors/training/lastwords.py: a rank blocked in here sends nothing else
            self.inflight = (spec, args, kwargs, t0)
            try:
                res = fn(*args, **kwargs)
            finally:
                self.inflight = None
            t1 = perf()
            try:
                return done(spec, args, kwargs, t0, t1, res, cuda)
            except Exception:  # timing must never break the collective's caller
                self.errors += 1
                return res

        wrapper.__fabricscope_original__ = fn  # type: ignore[attr-defined]
        return wrapper

    # -- per call ---------------------------------------------------------------------------------
    def _done(self, spec: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any], t0: float,
              t1: float, res: Any, cuda: Any) -> Any:
        op, t_pos, g_pos, a_pos, always_async, peer, p_pos = spec
        group = kwargs["group"] if "group" in kwargs else (args[g_pos] if 0 <= g_pos < len(args) else None)
        g = self.group(group)
        if peer is None:
            g.seq += 1
            seq = g.seq
        else:
            key = (op, kwargs[peer] if peer in kwargs else (args[p_pos] if 0 <= p_pos < len(args) else None))
            seq = g.p2p[key] = g.p2p.get(key, 0) + 1
        size = 0
        for pos, pname in t_pos:
            size += nbytes(kwargs[pname] if pname in kwargs else (args[pos] if pos < len(args) else None))
        if "async_op" in kwargs:
            is_async = always_async or bool(kwargs["async_op"])
        else:
            is_async = always_async or (0 <= a_pos < len(args) and bool(args[a_pos]))
        if cuda is None and not (is_async and res is not None):  # sync on CPU: a tuple in the ring
            off = self.rec.wall_offset
            n = next(self._ticket)
            if self._ring[n % _RING] is None:
                self._ring[n % _RING] = (n, op, seq, size, g.name, g.size, self.rec._step, t0 + off, t1 + off)
            else:  # the resolver is a whole ring behind: this call is not recorded
                self._skipped.add(n)
                self.ring_dropped += 1
                self.rec._count_drop(1)
            if self._resolver is None:
                self._start_resolver()
            return res
        # CUDA and async ops: a tuple of the fields, made into a record by the resolver (no dict here)
        fields = (op, seq, size, g.name, g.size, self.rec._step, t0 + self.rec.wall_offset)
        if cuda is DRY:  # no event pair free: the op keeps its seq, is counted, and is not posted
            return res
        if cuda is not None:
            if is_async and res is not None:
                return TimedWork(res, _CudaEnd(self, cuda, fields))
            self.cuda.end(cuda, fields)
            if self._resolver is None:
                self._start_resolver()
            return res
        return self.track_async(res, fields)

    def _flight_slot(self, flight: Any, spec: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any],
                     t0: float) -> list[Any]:
        """Flight Recorder path on CPU: only this call's clock, one list, joined by the reader thread
        with the ring's entry (which carries seq, op, bytes and group)."""
        op, _t_pos, g_pos = spec[0], spec[1], spec[2]
        group = kwargs["group"] if "group" in kwargs else (args[g_pos] if 0 <= g_pos < len(args) else None)
        slot: list[Any] = [self.group(group).raw, str(threading.get_ident()), t0 + self.rec.wall_offset, None, None, op]
        flight.timings.append(slot)
        return slot

    def _flight_end(self, slot: list[Any], spec: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any],
                    t1: float, res: Any) -> Any:
        a_pos, always_async = spec[3], spec[4]
        off = self.rec.wall_offset
        is_async = always_async or bool(kwargs["async_op"] if "async_op" in kwargs
                                        else (0 <= a_pos < len(args) and args[a_pos]))
        if not is_async or res is None:
            slot[4] = t1 + off
            slot[3] = t1 + off
            return res
        slot[3] = t1 + off
        perf = time.perf_counter

        def end(*_a: Any) -> None:
            slot[4] = perf() + self.rec.wall_offset

        try:
            res.get_future().add_done_callback(end)
        except Exception:  # no future (some gloo works): the end is when it is waited on
            return TimedWork(res, end)
        return res

    def track_async(self, work: Any, fields: tuple[Any, ...]) -> Any:
        """End the op when the work completes (future callback), else when it is waited on; either
        way one tuple goes in the ring, like a sync op's."""
        end = _AsyncEnd(self, fields)
        try:
            fut = work.get_future()
        except Exception:  # e.g. gloo send/recv: no future
            return TimedWork(work, end)
        fut.add_done_callback(end)
        return work

    def put(self, fields: tuple[Any, ...], end: float) -> None:
        """One CPU-timed op into the ring (any thread); ``fields`` as :meth:`_done` makes them."""
        n = next(self._ticket)
        if self._ring[n % _RING] is None:
            op, seq, size, group, group_size, step, start = fields
            self._ring[n % _RING] = (n, op, seq, size, group, group_size, step, start, end)
        else:
            self._skipped.add(n)
            self.ring_dropped += 1
            self.rec._count_drop(1)
        if self._resolver is None:
            self._start_resolver()

    def group(self, pg: Any) -> _Group:
        if pg is None:
            pg = self.dist.group.WORLD
        g = self.groups.get(id(pg))
        if g is None:
            g = self.groups[id(pg)] = _Group(pg, self._group_name(pg), _size(pg))
        return g

    def _group_name(self, pg: Any) -> str:
        alias = self.aliases.get(id(pg))
        if alias:
            return alias
        if pg is self.dist.group.WORLD:
            return "world"
        name = str(getattr(pg, "group_name", "") or "")
        desc = str(getattr(pg, "group_desc", "") or "")
        # group_name is unique and equal on every member; the description makes it readable.
        return f"{desc}.{name}" if desc and desc != "undefined" else name or "unknown"

    def name_group(self, pg: Any, name: str) -> None:
        self.aliases[id(pg)] = name
        raw = str(getattr(pg, "group_name", "") or "")
        if raw:
            self.aliases_by_name[raw] = name
        g = self.groups.get(id(pg))
        if g is not None:
            g.name = name

    # -- CUDA -------------------------------------------------------------------------------------
    def _cuda_start(self, args: tuple[Any, ...], kwargs: dict[str, Any], t_pos: list[tuple[int, str]]) -> Any:
        try:
            t = None
            if t_pos:  # the first tensor argument tells where the collective runs
                pos, pname = t_pos[0]
                t = kwargs[pname] if pname in kwargs else (args[pos] if pos < len(args) else None)
                if isinstance(t, (list, tuple)):
                    t = t[0] if t else None
            if t is None or not getattr(t, "is_cuda", False):
                return None
        except Exception:
            self.errors += 1
            return None
        try:
            return self.cuda.start()
        except Exception:  # a CUDA op that the CPU clock would mistime: not posted, counted
            self.errors += 1
            return DRY

    def _cuda_end(self, token: Any, fields: tuple[Any, ...], waited: bool = False) -> None:
        self.cuda.end(token, fields, waited)
        if self._resolver is None:
            self._start_resolver()

    @property
    def events_created(self) -> int:
        return self.cuda.pool.events_created

    def _start_resolver(self) -> None:
        with self._start_lock:
            if self._resolver is None:
                self._resolver = threading.Thread(target=self._resolve_loop, name="fabricscope-resolver",
                                                  daemon=True)
                self._resolver.start()

    def anchor_cuda(self) -> None:
        """One device sync, outside the training loop, to map CUDA event times to wall time."""
        try:
            torch = self.torch
            torch.cuda.synchronize()
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            ev.synchronize()
            self._anchor = (ev, time.time())
        except Exception as e:
            log.debug("fabricscope: no CUDA anchor: %s", e)

    def _resolve_loop(self) -> None:
        while not self._stop.wait(0.1):
            self.resolve()

    def drain(self) -> int:
        """Make records of the ring's tuples, in the order the calls took their slots; posted."""
        with self._drain_lock:
            ring, r, n = self._ring, self._read, 0
            while True:
                e = ring[r % _RING]
                if e is None or e[0] != r:
                    if r in self._skipped:
                        self._skipped.discard(r)
                        r += 1
                        continue
                    break  # not written yet (its call is between its ticket and its slot)
                ring[r % _RING] = None
                r += 1
                _, op, seq, size, group, group_size, step, start, end = e
                m = self.rec._collective_meta(op, seq, size, group, group_size)
                m.pop("step", None)
                if step is not None:
                    m["step"] = step
                m["start"], m["end"] = start, end
                self.rec._submit("collectives", m)
                n += 1
            self._read = r
        self.recorded += n
        return n

    def resolve(self) -> int:
        """Post the ring's records, and the CUDA-timed collectives whose end event has completed
        (per stream, in issue order)."""
        return self.drain() + self.cuda.resolve()


class _CudaEnd:
    """Records the end event once ``wait()`` returned (the stream now waits for the collective)."""

    needs_wait = True
    __slots__ = ("fields", "timer", "token")

    def __init__(self, timer: CollectiveTimer, token: Any, fields: tuple[Any, ...]) -> None:
        self.timer, self.token, self.fields = timer, token, fields

    def __call__(self) -> None:
        t = self.timer
        try:
            t.cuda.end(self.token, self.fields, True)
            if t._resolver is None:
                t._start_resolver()
        except Exception:
            t.errors += 1


class _AsyncEnd:
    """A CPU async op's end: its future's callback (gloo's thread) or its ``wait()``."""

    needs_wait = False
    __slots__ = ("fields", "timer")

    def __init__(self, timer: CollectiveTimer, fields: tuple[Any, ...]) -> None:
        self.timer, self.fields = timer, fields

    def __call__(self, *_future: Any) -> None:
        try:
            t = self.timer
            t.put(self.fields, time.perf_counter() + t.rec.wall_offset)
        except Exception:
            self.timer.errors += 1


def _size(pg: Any) -> int | None:
    try:
        return int(pg.size())
    except Exception:
        return None


def ddp_comm_hook(rec: Recorder, inner: Any = None) -> Any:
    """A DDP comm hook that times each gradient bucket's all-reduce.

    ``ddp.register_comm_hook(state, rec.ddp_comm_hook())`` times the default averaging all-reduce;
    pass ``inner`` (any hook, e.g. ``fp16_compress_hook``) to time that one instead. The collectives
    the inner hook issues through ``torch.distributed`` are not counted twice.
    """
    timer = rec._timer()
    if inner is None:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook as inner

    # No annotations: DDP checks them and accepts only its own types or none.
    def hook(state, bucket):
        if not rec.collectives_on or timer is None:
            return inner(state, bucket)
        if timer.flight is not None and not timer.flight.disabled:
            return inner(state, bucket)  # the Flight Recorder lists the bucket's all-reduce itself
        fields = None
        t0 = time.perf_counter()
        try:
            g = timer.group(state if state is not None and hasattr(state, "size") else None)
            g.seq += 1
            buf = bucket.buffer()
            fields = ("all_reduce", g.seq, nbytes(buf), g.name, g.size, rec._step, t0 + rec.wall_offset)
            cuda = getattr(buf, "is_cuda", False)
        except Exception:
            timer.errors += 1
            cuda = False
        token = timer._cuda_start((buf,), {}, [(0, "tensor")]) if (cuda and fields is not None) else None
        timer.tls.suppress = True
        try:
            fut = inner(state, bucket)
        finally:
            timer.tls.suppress = False
        if fields is None or token is DRY:
            return fut
        if token is not None:
            # The callback runs with the current stream synchronised with the collective's.
            def _end(f: Any) -> Any:
                try:
                    timer._cuda_end(token, fields, waited=True)
                except Exception:
                    timer.errors += 1
                return f.value()

            return fut.then(_end)
        fut.add_done_callback(_AsyncEnd(timer, fields))
        return fut

    return hook
