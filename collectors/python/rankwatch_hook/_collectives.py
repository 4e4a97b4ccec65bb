"""Times torch.distributed's collectives and p2p calls, reduced to one `collective` event per step,
communicator, op (and peer, for send/recv): count, bytes, summed and slowest duration.

Only the Python entry points are wrapped (torch.distributed.all_reduce, all_gather_into_tensor,
reduce_scatter_tensor, broadcast, all_to_all_single, send/recv, isend/irecv …), as Megatron-LM and
most training loops call them. DDP's gradient all-reduces (issued from its C++ reducer) and
functional collectives (torch.compile, FSDP2) do not pass through them: use the NCCL Inspector
source for those.

How a call is timed, never synchronizing the GPU:
- CUDA tensors, blocking call: CUDA events recorded on the current stream before and after the
  call. After a blocking call returns, the stream waits on the collective, so the pair spans what
  the stream spent on it (waiting for peers included). The events are read later, once done.
- CUDA tensors, async_op=True / isend / irecv: the collective's own GPU duration
  (Work._get_duration(), which needs TORCH_NCCL_ENABLE_TIMING=1 set before the process group is
  made), read once the work completes; without it the call is counted as untimed.
- CPU tensors (gloo): wall time from the call to the work's completion (a blocking call's return,
  or the async work's future).
"""

import inspect
import threading
import time

# name → (contract op, the bound arguments whose tensors are the payload, the peer's argument).
_SPECS = {
    "all_reduce": ("allreduce", ("tensor",), None),
    "broadcast": ("broadcast", ("tensor",), None),
    "all_gather": ("allgather", ("tensor_list",), None),
    "all_gather_into_tensor": ("allgather", ("output_tensor",), None),
    "_all_gather_base": ("allgather", ("output_tensor",), None),
    "reduce_scatter": ("reducescatter", ("input_list",), None),
    "reduce_scatter_tensor": ("reducescatter", ("input",), None),
    "_reduce_scatter_base": ("reducescatter", ("input",), None),
    "all_to_all": ("alltoall", ("input_tensor_list",), None),
    "all_to_all_single": ("alltoall", ("input",), None),
    "send": ("send", ("tensor",), "dst"),
    "recv": ("recv", ("tensor",), "src"),
    "isend": ("send", ("tensor",), "dst"),
    "irecv": ("recv", ("tensor",), "src"),
}
_ASYNC_ALWAYS = {"isend", "irecv"}
MAX_PENDING_STEPS = 64


def _nbytes(value):
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    try:
        return int(value.numel()) * int(value.element_size())
    except Exception:  # noqa: BLE001 - not a tensor
        return 0


def _first_tensor(value):
    if isinstance(value, (list, tuple)):
        return _first_tensor(value[0]) if value else None
    return value if hasattr(value, "is_cuda") else None


class _Op:
    """One call: resolved when its duration is known (`ms`), or given up on (`untimed`)."""

    __slots__ = ("key", "nbytes", "seq", "ms", "untimed", "_pair", "_work", "_t0")

    def __init__(self, key, nbytes, seq):
        self.key, self.nbytes, self.seq = key, nbytes, seq
        self.ms = None
        self.untimed = False
        self._pair = self._work = self._t0 = None

    def done(self):
        if self.ms is not None or self.untimed:
            return True
        try:
            if self._pair is not None and self._pair[1].query():
                self.ms = self._pair[0].elapsed_time(self._pair[1])
            elif self._work is not None and self._work.is_completed():
                ms = self._work._get_duration()
                if ms and ms > 0:
                    self.ms = ms
                else:
                    self.untimed = True
        except Exception:  # noqa: BLE001 - a failed collective or an event that errors
            self.untimed = True
        return self.ms is not None or self.untimed


class Collectives:
    """Wraps torch.distributed's functions once; `close_step(n)` closes the current step's calls."""

    def __init__(self, dist, torch, on_events, count, identity):
        self._dist, self._torch = dist, torch
        self._emit, self._count, self._identity = on_events, count, identity
        self._lock = threading.Lock()
        self._ops = []
        self._pending = []
        self._seq = {}
        self._originals = {}
        for name in _SPECS:
            fn = getattr(dist, name, None)
            if fn is None or getattr(fn, "_rankwatch", False):
                continue
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError):
                continue
            self._originals[name] = fn
            setattr(dist, name, self._wrap(name, fn, sig))

    def unwrap(self):
        for name, fn in self._originals.items():
            setattr(self._dist, name, fn)
        self._originals = {}

    # ---- around each call (the training thread) ----------------------------------------------

    def _wrap(self, name, fn, sig):
        op, payload, peer_arg = _SPECS[name]

        def wrapper(*args, **kwargs):
            try:
                pre = self._before(name, op, payload, peer_arg, sig, args, kwargs)
            except Exception:  # noqa: BLE001 - the hook never breaks training
                pre = None
                self._count("hook_errors")
            result = fn(*args, **kwargs)
            if pre is not None:
                try:
                    self._after(name, pre, result)
                except Exception:  # noqa: BLE001
                    self._count("hook_errors")
            return result

        wrapper._rankwatch = True
        wrapper.__wrapped__ = fn
        wrapper.__name__ = getattr(fn, "__name__", name)
        wrapper.__doc__ = getattr(fn, "__doc__", None)
        return wrapper

    def _before(self, name, op, payload, peer_arg, sig, args, kwargs):
        bound = sig.bind_partial(*args, **kwargs).arguments
        group = bound.get("group")
        dist = self._dist
        pg = group if group is not None else dist.group.WORLD
        comm = str(getattr(pg, "group_name", None) or "default")
        nranks = dist.get_world_size(pg)
        peer = bound.get(peer_arg) if peer_arg else None
        key = (comm, op, nranks, peer)
        tensors = [bound.get(a) for a in payload]
        with self._lock:
            seq = self._seq[comm] = self._seq.get(comm, 0) + 1
        rec = _Op(key, sum(_nbytes(t) for t in tensors), seq)
        first = _first_tensor(tensors[0]) if tensors else None
        cuda = first is not None and first.is_cuda
        asynchronous = name in _ASYNC_ALWAYS or bool(bound.get("async_op", False))
        if cuda and not asynchronous:
            ev = self._torch.cuda.Event
            rec._pair = (ev(enable_timing=True), ev(enable_timing=True))
            rec._pair[0].record()
        rec._t0 = time.perf_counter()
        return rec, cuda, asynchronous

    def _after(self, name, pre, result):
        rec, cuda, asynchronous = pre
        if not asynchronous:
            if cuda:
                rec._pair[1].record()
            else:
                rec.ms = (time.perf_counter() - rec._t0) * 1000.0
        elif result is None or not hasattr(result, "is_completed"):
            rec.untimed = True
        elif cuda:
            rec._work = result
        else:
            t0 = rec._t0

            def finished(_fut, rec=rec, t0=t0):
                rec.ms = (time.perf_counter() - t0) * 1000.0

            try:
                result.get_future().add_done_callback(finished)
            except Exception:  # noqa: BLE001 - a backend without futures
                rec._work = result
        with self._lock:
            self._ops.append(rec)

    # ---- at each step's end (the training thread) ----------------------------------------------

    def close_step(self, step, ts, block=False):
        """Closes the calls made since the last step as `step`, then sends every step whose calls
        are all resolved (`block`: waits for the GPU, for shutdown only)."""
        with self._lock:
            ops, self._ops = self._ops, []
        if ops:
            self._pending.append((step, ts, ops))
        keep = []
        for s, t, pending in self._pending:
            if block:
                for o in pending:
                    if o._pair is not None and o.ms is None:
                        try:
                            o._pair[1].synchronize()
                        except Exception:  # noqa: BLE001
                            o.untimed = True
                    elif o._work is not None and o.ms is None:
                        try:
                            o._work.wait()
                        except Exception:  # noqa: BLE001
                            o.untimed = True
            if all(o.done() for o in pending):
                self._send(s, t, pending)
            else:
                keep.append((s, t, pending))
        if len(keep) > MAX_PENDING_STEPS:
            for _ in range(len(keep) - MAX_PENDING_STEPS):
                self._count("collective_steps_dropped")
            keep = keep[-MAX_PENDING_STEPS:]
        self._pending = keep

    def _send(self, step, ts, ops):
        reduced = {}
        for o in ops:
            if o.untimed:
                self._count("collectives_untimed")
                continue
            r = reduced.get(o.key)
            if r is None:
                r = reduced[o.key] = {"count": 0, "bytes": 0, "dur_ms": 0.0, "max_ms": 0.0, "seq": 0}
            r["count"] += 1
            r["bytes"] += o.nbytes
            r["dur_ms"] += o.ms
            r["max_ms"] = max(r["max_ms"], o.ms)
            r["seq"] = max(r["seq"], o.seq)
        events = []
        for (comm, op, nranks, peer), r in reduced.items():
            ev = dict(self._identity())
            ev.update(
                v=1,
                kind="collective",
                ts=ts,
                step=step,
                op=op,
                comm=comm,
                nranks=nranks,
                timing="cuda_events" if self._cuda_timed(ops, (comm, op, nranks, peer)) else "wall",
                **r,
            )
            if peer is not None:
                ev["peer"] = peer
            events.append(ev)
        if events:
            self._emit(events)

    @staticmethod
    def _cuda_timed(ops, key):
        return any(o.key == key and (o._pair is not None or o._work is not None) for o in ops)
