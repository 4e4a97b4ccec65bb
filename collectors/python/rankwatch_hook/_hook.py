"""The hook: timing on the training thread (cheap), sending on a daemon thread (bounded)."""

import atexit
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager

from ._collectives import Collectives
from ._sender import Sender

DEFAULT_ENDPOINT = "http://127.0.0.1:7070/v1/ingest"


def _env_int(name, default=None):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return default


def _torch():
    """PyTorch only when the training process imported it already: never imported from here."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch
    except Exception:  # noqa: BLE001 - a broken torch must not break training
        pass
    return None


class _Pending:
    """A step whose CUDA events have not all completed yet."""

    __slots__ = ("event", "comm_pairs")

    def __init__(self, event, comm_pairs):
        self.event = event
        self.comm_pairs = comm_pairs


class Hook:
    def __init__(
        self,
        job,
        endpoint=None,
        token=None,
        rank=None,
        host=None,
        gpu=None,
        stage=None,
        world_size=None,
        model=None,
        parallel=None,
        gpu_model=None,
        dtype="bf16",
        global_batch_tokens=None,
        flops_per_step=None,
        send_job=None,
        start_step=0,
        use_cuda_events=True,
        flush_interval=1.0,
        max_queue=20000,
        timeout=2.0,
        collectives=False,
    ):
        self.job = str(job)
        self.rank = rank if rank is not None else _env_int("RANK", 0)
        self.host = host or os.environ.get("RANKWATCH_HOST") or socket.gethostname()
        self.gpu = gpu if gpu is not None else _env_int("LOCAL_RANK", 0)
        self.stage = stage
        self.world_size = world_size or _env_int("WORLD_SIZE", 1)
        self.parallel = _layout(parallel, self.world_size)
        if self.stage is None and parallel:
            # Megatron's rank order puts pipeline stages outermost.
            self.stage = self.rank // max(1, self.world_size // self.parallel["pp"])
        self._step = start_step
        self._use_cuda = use_cuda_events
        self._comm_wall = 0.0
        self._comm_pairs = None
        self._pending = []
        self.sender = Sender(
            endpoint or os.environ.get("RANKWATCH_ENDPOINT") or DEFAULT_ENDPOINT,
            token or os.environ.get("RANKWATCH_TOKEN"),
            flush_interval=flush_interval,
            max_queue=max_queue,
            timeout=timeout,
        )
        self._collectives = self._wrap_collectives() if collectives else None
        if send_job if send_job is not None else self.rank == 0:
            self._send_job(model, parallel is not None, gpu_model, dtype, global_batch_tokens, flops_per_step)

    def _wrap_collectives(self):
        """collectives=True: torch.distributed's calls timed, one event per step, comm and op."""
        dist = sys.modules.get("torch.distributed")
        if dist is None or not hasattr(dist, "all_reduce"):
            _warn("rankwatch_hook: collectives=True needs torch.distributed imported before init(); not timing them")
            return None
        try:
            return Collectives(dist, sys.modules.get("torch"), self._put_all, self.sender.count, self._identity)
        except Exception:  # noqa: BLE001 - never break training
            self.sender.count("hook_errors")
            return None

    def _identity(self):
        return {"job": self.job, "rank": self.rank, "host": self.host, "gpu": self.gpu}

    def _put_all(self, events):
        for ev in events:
            self.sender.put(ev)

    # ---- what the training loop calls -------------------------------------------------------

    @contextmanager
    def step(self, tokens=None, step=None):
        """Times one optimizer step. Exceptions from the body propagate; the hook's never do.

        `tokens`: the tokens of the global batch this rank's data-parallel replica consumed in the
        step (micro batch x micro batches x full sequence length), the same number on every rank of
        the replica whatever its tp/pp/cp position; rankwatch divides the ranks' sum by tp*pp*cp.
        Not needed when `global_batch_tokens` was given to init().
        """
        start = time.perf_counter()
        cuda = None
        try:
            self._comm_wall = 0.0
            torch = _torch() if self._use_cuda else None
            if torch is not None:
                cuda = torch
                self._comm_pairs = []
                self._resolve_pending(block=False)
        except Exception:  # noqa: BLE001
            cuda = None
        try:
            yield self
        finally:
            try:
                self._finish_step(start, tokens, step, cuda)
            except Exception:  # noqa: BLE001 - never break training
                self.sender.count("hook_errors")

    @contextmanager
    def comm(self):
        """Marks time blocked in collectives (e.g. around all_reduce / a pipeline send)."""
        t0 = time.perf_counter()
        pair = None
        try:
            if self._comm_pairs is not None:
                torch = sys.modules["torch"]
                pair = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                pair[0].record()
        except Exception:  # noqa: BLE001
            pair = None
        try:
            yield
        finally:
            self._comm_wall += time.perf_counter() - t0
            if pair is not None:
                try:
                    pair[1].record()
                    self._comm_pairs.append(pair)
                except Exception:  # noqa: BLE001
                    pass

    @contextmanager
    def checkpoint(self, step=None, nbytes=None, phase="save"):
        """Times a checkpoint save (or load); a failing save is reported with ok=false and re-raised."""
        t0 = time.perf_counter()
        ok = True
        try:
            yield
        except BaseException:
            ok = False
            raise
        finally:
            try:
                ev = {
                    "v": 1,
                    "kind": "checkpoint",
                    "ts": time.time() * 1000.0,
                    "job": self.job,
                    "rank": self.rank,
                    "step": int(step if step is not None else self._step),
                    "phase": phase,
                    "dur_ms": (time.perf_counter() - t0) * 1000.0,
                    "ok": ok,
                }
                if nbytes is not None:
                    ev["bytes"] = nbytes
                self.sender.put(ev)
            except Exception:  # noqa: BLE001
                self.sender.count("hook_errors")

    def counters(self):
        return self.sender.counters()

    def shutdown(self, timeout=2.0):
        """Sends what is queued, waiting at most `timeout` seconds (also run at exit)."""
        try:
            self._resolve_pending(block=True)
        except Exception:  # noqa: BLE001
            pass
        if self._collectives is not None:
            try:
                self._collectives.close_step(self._step, time.time() * 1000.0, block=True)
                self._collectives.unwrap()
            except Exception:  # noqa: BLE001
                pass
        self.sender.close(timeout)

    # ---- inside -----------------------------------------------------------------------------

    def _finish_step(self, start, tokens, step, cuda):
        wall_ms = (time.perf_counter() - start) * 1000.0
        n = int(step if step is not None else self._step)
        self._step = n + 1
        ev = {
            "v": 1,
            "kind": "step",
            "ts": time.time() * 1000.0,
            "job": self.job,
            "rank": self.rank,
            "host": self.host,
            "gpu": self.gpu,
            "step": n,
            "step_ms": wall_ms,
            # The node collector maps NCCL Inspector / RAS records (host, pid) to this rank through it.
            "pid": os.getpid(),
        }
        if self.stage is not None:
            ev["stage"] = self.stage
        if tokens is not None:
            ev["tokens"] = tokens
        if self._collectives is not None:
            # Collectives called since the last step's end belong to this step.
            self._collectives.close_step(n, ev["ts"])
        pairs = self._comm_pairs
        self._comm_pairs = None
        if cuda is not None and pairs:
            # GPU-side collective time is known once the events complete: resolve later, never sync.
            ev["timing"] = "cuda_events"
            self._pending.append(_Pending(ev, pairs))
            self._resolve_pending(block=False)
            return
        comm = min(self._comm_wall * 1000.0, wall_ms)
        ev["comm_wait_ms"] = comm
        ev["compute_ms"] = wall_ms - comm
        ev["timing"] = "wall"
        self.sender.put(ev)

    def _resolve_pending(self, block):
        keep = []
        for p in self._pending:
            if not block and not all(b.query() for _, b in p.comm_pairs):
                keep.append(p)
                continue
            if block:
                for _, b in p.comm_pairs:
                    b.synchronize()
            comm = sum(a.elapsed_time(b) for a, b in p.comm_pairs)
            comm = min(comm, p.event["step_ms"])
            p.event["comm_wait_ms"] = comm
            p.event["compute_ms"] = p.event["step_ms"] - comm
            self.sender.put(p.event)
        # Bounded: a GPU that never completes its events must not grow this list.
        self._pending = keep[-64:]

    def _send_job(self, model, layout_given, gpu_model, dtype, global_batch_tokens, flops_per_step):
        if gpu_model is None:
            torch = _torch()
            try:
                gpu_model = torch.cuda.get_device_name() if torch is not None else None
            except Exception:  # noqa: BLE001
                gpu_model = None
        ev = {
            "v": 1,
            "kind": "job",
            "ts": time.time() * 1000.0,
            "job": self.job,
            "world_size": self.world_size,
            "gpu_model": gpu_model or "unknown",
            "dtype": dtype,
            "parallel": self.parallel,
        }
        if not layout_given:
            ev["parallel_assumed"] = True
            _warn(
                "rankwatch_hook: init() got no parallel=; assuming data parallelism only "
                "(tp=pp=cp=1, dp=%d). With tensor, pipeline or context parallelism pass "
                'parallel={"tp": .., "pp": .., "cp": ..}, or MFU is counted tp*pp*cp times over.'
                % self.world_size
            )
        if model:
            ev["model"] = model
        if global_batch_tokens is not None:
            ev["global_batch_tokens"] = global_batch_tokens
        if flops_per_step is not None:
            ev["flops_per_step"] = flops_per_step
        ev["hosts"] = [self.host]
        self.sender.put(ev)


def _warn(msg):
    try:
        sys.stderr.write(msg + "\n")
    except Exception:  # noqa: BLE001 - a closed stderr must not break training
        pass


def _layout(parallel, world):
    """tp/pp/cp default to 1 and dp to what is left of the world; says when they do not multiply up."""
    p = dict(parallel or {})
    for k in ("tp", "pp", "cp"):
        p[k] = int(p.get(k) or 1)
    shards = p["tp"] * p["pp"] * p["cp"]
    if not p.get("dp"):
        p["dp"] = max(1, world // shards)
    p["dp"] = int(p["dp"])
    if parallel and shards * p["dp"] != world:
        _warn(
            "rankwatch_hook: parallel tp*pp*cp*dp = %d but the world size is %d; MFU will say so"
            % (shards * p["dp"], world)
        )
    return p


_default = None
_default_lock = threading.Lock()


def init(job, **kwargs):
    """Creates the process-wide hook (once; later calls return the same one)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Hook(job, **kwargs)
            atexit.register(_default.shutdown)
        return _default


def get():
    return _default


def _need():
    if _default is None:
        raise RuntimeError("rankwatch_hook: call rw.init(job=...) first")
    return _default


def step(tokens=None, step=None):
    return _need().step(tokens=tokens, step=step)


def comm():
    return _need().comm()


def checkpoint(step=None, nbytes=None, phase="save"):
    return _need().checkpoint(step=step, nbytes=nbytes, phase=phase)


def counters():
    return _default.counters() if _default is not None else {}


def shutdown(timeout=2.0):
    if _default is not None:
        _default.shutdown(timeout)
