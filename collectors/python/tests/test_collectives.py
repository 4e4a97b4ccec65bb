"""collectives=True with real torch.distributed (gloo, 2 processes) and a real HTTP receiver."""

import json
import os
import subprocess
import sys

from test_hook import Receiver, free_port

HERE = os.path.dirname(os.path.abspath(__file__))


def run_job(endpoint):
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = dict(
            os.environ,
            RANKWATCH_ENDPOINT=endpoint,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            RANKWATCH_HOST="node-a",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-W", "ignore", os.path.join(HERE, "dist_loop.py")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


def test_collectives_are_timed_and_reduced_per_step_comm_and_op():
    rx = Receiver()
    try:
        outs = run_job(rx.url)
    finally:
        rx.close()
    # The wrapping changes nothing the job computes: (1+2) summed twice over 2 ranks, then once more.
    for o in outs:
        assert o["sums"] == [3.0 * 2 * 2] * 3
        assert o["counters"].get("hook_errors", 0) == 0
    coll = [e for e in rx.events if e["kind"] == "collective"]
    by = {(e["rank"], e["step"], e["op"]): e for e in coll}
    assert len(by) == len(coll), "one event per rank, step, communicator and op"
    for rank in (0, 1):
        for step in range(3):
            ar = by[(rank, step, "allreduce")]
            assert (ar["job"], ar["host"], ar["gpu"], ar["comm"], ar["nranks"]) == ("distjob", "node-a", rank, "0", 2)
            assert ar["count"] == 3 and ar["bytes"] == 3 * 4000
            assert ar["dur_ms"] >= ar["max_ms"] > 0 and ar["timing"] == "wall"
            assert by[(rank, step, "allgather")]["bytes"] == 8000
            assert by[(rank, step, "broadcast")]["count"] == 1
            # The communicator's count of calls up to its last one of the kind: 6 calls a step
            # (3 all_reduce, all_gather, broadcast, send or recv); the broadcast is the 5th.
            assert by[(rank, step, "broadcast")]["seq"] == 6 * step + 5
        assert (rank, 0, "send" if rank == 1 else "recv") not in by
    assert by[(0, 1, "send")]["peer"] == 1 and by[(0, 1, "send")]["bytes"] == 1000
    assert by[(1, 1, "recv")]["peer"] == 0
    # Rank 1 slept before step 2's first all_reduce: rank 0 spent that time waiting in it.
    assert by[(0, 2, "allreduce")]["max_ms"] > by[(1, 2, "allreduce")]["max_ms"]
    assert by[(0, 2, "allreduce")]["max_ms"] >= 200


def test_collectives_without_torch_distributed_is_said_and_training_goes_on(tmp_path):
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import rankwatch_hook as rw\n"
        "rw.init(job='j', endpoint='http://127.0.0.1:9/v1/ingest', parallel={'dp': 1}, world_size=1, collectives=True)\n"
        "with rw.step():\n    pass\n"
        "rw.shutdown(0.1)\nprint('trained')\n" % os.path.join(HERE, "..")
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "trained"
    assert "collectives=True needs torch.distributed imported before init()" in out.stderr
