"""A small training-like loop: compute (sleep), an all-reduce (sleep inside rw.comm()), a
checkpoint every 10 steps. `--mode baseline` runs the same loop without the hook."""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--compute-ms", type=float, default=5.0)
p.add_argument("--comm-ms", type=float, default=2.0)
p.add_argument("--mode", choices=["hook", "baseline"], default="hook")
args = p.parse_args()

if args.mode == "hook":
    import rankwatch_hook as rw

    rw.init(
        job="pyjob",
        model={"layers": 2, "hidden": 64, "heads": 4, "seq_len": 128, "vocab": 1000},
        parallel={"tp": 1, "pp": 1, "dp": 2},
        gpu_model="H100-SXM",
        global_batch_tokens=1024,
        world_size=2,
    )
    step, comm, checkpoint = rw.step, rw.comm, rw.checkpoint
else:
    from contextlib import nullcontext

    def step(**_):
        return nullcontext()

    comm = step

    def checkpoint(**_):
        return nullcontext()


t0 = time.perf_counter()
for i in range(args.steps):
    with step(tokens=512):
        time.sleep(args.compute_ms / 1000)
        with comm():
            time.sleep(args.comm_ms / 1000)
    if i % 10 == 9:
        with checkpoint(step=i, nbytes=1 << 20):
            time.sleep(0.003)
elapsed = time.perf_counter() - t0
out = {"elapsed": elapsed, "pid": os.getpid()}
if args.mode == "hook":
    out["counters"] = rw.counters()
print(json.dumps(out), flush=True)
