"""A 2-rank torch.distributed job on gloo (CPU) with rw.init(collectives=True): each step runs
two blocking all_reduces, one async all_reduce, an all_gather_into_tensor, a broadcast and a
send/recv pair. Rank 1 sleeps before step 2's first all_reduce, so rank 0 waits there. Prints the
all_reduce results so the test can check the wrapping changed nothing."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import rankwatch_hook as rw  # noqa: E402

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", rank=rank, world_size=2)
rw.init(job="distjob", parallel={"dp": 2}, world_size=2, gpu_model="H100-SXM", collectives=True)
sums = []
for step in range(3):
    with rw.step():
        t = torch.full((1000,), float(rank + 1))
        if step == 2 and rank == 1:
            time.sleep(0.5)
        dist.all_reduce(t)
        dist.all_reduce(t)
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        out = torch.empty(2000)
        dist.all_gather_into_tensor(out, torch.full((1000,), float(rank)))
        dist.broadcast(t, src=0)
        if rank == 0:
            dist.send(torch.ones(250), dst=1)
        else:
            dist.recv(torch.empty(250), src=0)
        sums.append(float(t[0]))
rw.shutdown()
dist.destroy_process_group()
print(json.dumps({"sums": sums, "counters": rw.counters(), "wrapped": dist.all_reduce.__name__}), flush=True)
