"""A hook-instrumented job as docs/collectors/python-hook.md says to write it, every rank of a
tp x pp x cp x dp layout in one process (one Hook per rank), its events written as JSON lines.

Each rank passes `parallel=` and `rw.step(tokens=N)` with N the tokens its data-parallel replica
consumed (micro batch x micro batches x sequence length), the same on every rank of the replica.
Used by tests/mfu-layout.int.test.ts to check the stored MFU against `rankwatch mfu`.
"""

import argparse
import gzip
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from rankwatch_hook import Hook  # noqa: E402

p = argparse.ArgumentParser()
for k in ("tp", "pp", "cp", "dp"):
    p.add_argument("--" + k, type=int, default=1)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--step-ms", type=float, default=10.0)
p.add_argument("--replica-tokens", type=int, required=True)
p.add_argument("--model", required=True, help="model config JSON file")
p.add_argument("--job", default="hook-layout")
p.add_argument("--out", required=True)
a = p.parse_args()

events = []
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if body[:2] == b"\x1f\x8b":
            body = gzip.decompress(body)
        lines = [line for line in body.decode().splitlines() if line.strip()]
        with lock:
            events.extend(lines)
        reply = json.dumps({"accepted": len(lines), "rejected": 0}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *_):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
endpoint = "http://127.0.0.1:%d/v1/ingest" % server.server_address[1]

with open(a.model) as f:
    model = json.load(f)
world = a.tp * a.pp * a.cp * a.dp
parallel = {"tp": a.tp, "pp": a.pp, "cp": a.cp}  # dp: what is left of the world size
hooks = [
    Hook(
        a.job,
        endpoint=endpoint,
        rank=r,
        gpu=r % 8,
        host="node-%d" % (r // 8),
        world_size=world,
        model=model,
        parallel=parallel,
        gpu_model="H100-SXM",
        use_cuda_events=False,
        flush_interval=0.2,
    )
    for r in range(world)
]
for s in range(a.steps):
    for h in hooks:
        with h.step(tokens=a.replica_tokens):
            time.sleep(a.step_ms / 1000)
for h in hooks:
    h.shutdown(timeout=5)
server.shutdown()
with open(a.out, "w") as f:
    f.write("\n".join(events) + "\n")
print(json.dumps({"events": len(events)}))
