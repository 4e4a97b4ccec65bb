"""rankwatch hook for training loops: step timings, checkpoints and job metadata as v1 events.

The three-line change::

    import rankwatch_hook as rw
    rw.init(job="llama-70b", model={...}, parallel={"tp": 8, "pp": 4, "dp": 16},
            global_batch_tokens=global_batch_size * seq_len)
    with rw.step():          # around each optimizer step
        train_step(batch)

Tokens: `global_batch_tokens` (the whole job's step) is simplest. Per step, `rw.step(tokens=N)`
takes the tokens this rank's data-parallel replica consumed, the same N on every rank of the
replica whatever its tp/pp/cp position (rankwatch divides the ranks' sum by tp*pp*cp).

Standard library only. PyTorch is used when the training process has already imported it
(never imported here): then `rw.comm()` blocks are timed with CUDA events, so compute vs
time blocked in collectives comes from the GPU stream. Events go to `rankwatch up` (or the
node collector) over loopback HTTP from a background thread; the training thread only appends
to a bounded queue, so an absent or slow endpoint never blocks or crashes training.

`init(..., collectives=True)` also times torch.distributed's collective and p2p calls (imported by
the training script first) and sends one `collective` event per step, communicator and op.
"""

from ._hook import Hook, checkpoint, comm, counters, get, init, shutdown, step

__all__ = ["Hook", "init", "step", "comm", "checkpoint", "counters", "shutdown", "get"]
