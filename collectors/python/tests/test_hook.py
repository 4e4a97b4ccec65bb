"""The hook from the outside: a training-like loop in a subprocess, a real HTTP receiver."""

import gzip
import json
import re
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
LOOP = os.path.join(HERE, "train_loop.py")
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


class Receiver:
    """A real HTTP server that keeps every event it is sent; with `max_line_bytes`, a body with a
    longer line is refused whole with 413, as a server over its body limit does."""

    def __init__(self, max_line_bytes=None):
        self.events = []
        received = self.events

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if body[:2] == b"\x1f\x8b":
                    body = gzip.decompress(body)
                raw = [line for line in body.decode().splitlines() if line.strip()]
                if max_line_bytes is not None and any(len(line) > max_line_bytes for line in raw):
                    self.send_response(413)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                lines = [json.loads(line) for line in raw]
                received.extend(lines)
                reply = json.dumps({"accepted": len(lines), "rejected": 0}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/v1/ingest" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_loop(endpoint, *args, env=None, timeout=120):
    e = dict(os.environ, RANKWATCH_ENDPOINT=endpoint, RANK="0", LOCAL_RANK="3", WORLD_SIZE="2", RANKWATCH_HOST="node-a")
    e.update(env or {})
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, LOOP, *args], env=e, capture_output=True, text=True, timeout=timeout)
    total = time.perf_counter() - t0
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), total


def test_events_reach_the_receiver():
    rx = Receiver()
    try:
        res, _ = run_loop(rx.url, "--steps", "25")
    finally:
        rx.close()
    kinds = [e["kind"] for e in rx.events]
    assert kinds.count("job") == 1
    job = next(e for e in rx.events if e["kind"] == "job")
    assert job["job"] == "pyjob" and job["parallel"] == {"tp": 1, "pp": 1, "dp": 2, "cp": 1}
    assert job["model"]["hidden"] == 64 and job["gpu_model"] == "H100-SXM" and job["world_size"] == 2
    steps = [e for e in rx.events if e["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(25))
    for s in steps:
        assert (s["job"], s["rank"], s["host"], s["gpu"]) == ("pyjob", 0, "node-a", 3)
        assert s["v"] == 1 and s["ts"] > 0 and s["tokens"] == 512
        assert s["step_ms"] >= s["compute_ms"] > 0
        assert s["comm_wait_ms"] >= 1.5  # the 2 ms sleep inside rw.comm()
        assert abs(s["compute_ms"] + s["comm_wait_ms"] - s["step_ms"]) < 1e-6
    ckpts = [e for e in rx.events if e["kind"] == "checkpoint"]
    assert [c["step"] for c in ckpts] == [9, 19]
    assert all(c["ok"] and c["phase"] == "save" and c["dur_ms"] >= 2 and c["bytes"] == 1 << 20 for c in ckpts)
    assert res["counters"]["dropped"] == 0


def test_steps_carry_the_training_process_pid():
    # The node collector maps NCCL Inspector records (host, pid) to this rank through it.
    rx = Receiver()
    try:
        res, _ = run_loop(rx.url, "--steps", "5")
    finally:
        rx.close()
    steps = [e for e in rx.events if e["kind"] == "step"]
    assert len(steps) == 5
    assert res["pid"] != os.getpid()
    assert {s["pid"] for s in steps} == {res["pid"]}
    # Only steps carry it: the other kinds' contract has no pid.
    assert all("pid" not in e for e in rx.events if e["kind"] != "step")


def _median_elapsed(endpoint, mode, runs=3):
    times = sorted(run_loop(endpoint, "--steps", "200", "--compute-ms", "2", "--comm-ms", "1", "--mode", mode)[0]["elapsed"] for _ in range(runs))
    return times[len(times) // 2]


def test_endpoint_down_training_runs_at_full_speed():
    url = "http://127.0.0.1:%d/v1/ingest" % free_port()
    base = _median_elapsed(url, "baseline")
    hooked = _median_elapsed(url, "hook")
    # Generous: CI machines are shared; the hook must not add anything like a network wait per step.
    assert hooked < base * 1.5 + 0.5, (hooked, base)
    res, total = run_loop(url, "--steps", "50")
    assert res["counters"]["sent"] == 0 and res["counters"]["queued"] >= 50
    assert total < 30


def test_endpoint_that_hangs_does_not_block_training():
    # Accepts connections and never answers: a POST can only end by its timeout.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    url = "http://127.0.0.1:%d/v1/ingest" % srv.getsockname()[1]
    try:
        base = _median_elapsed(url, "baseline", runs=1)
        res, total = run_loop(url, "--steps", "200", "--compute-ms", "2", "--comm-ms", "1")
    finally:
        srv.close()
    assert res["elapsed"] < base * 1.5 + 0.5, (res["elapsed"], base)
    assert total < 30  # exit waits for the sender at most a couple of seconds


def _read_until(stream, marker, timeout=60):
    """The first line of a child's pipe containing `marker`; fails after `timeout` instead of hanging."""
    found = []

    def reader():
        for line in stream:
            if marker in line:
                found.append(line)
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    assert found, "no line with %r within %ds" % (marker, timeout)
    return found[0]


def _start_up(tmp_path, *args):
    bin_js = os.path.join(REPO, "bin", "rankwatch.js")
    if not os.path.exists(os.path.join(REPO, "dist", "cli", "main.js")) or shutil.which("node") is None:
        pytest.skip("rankwatch is not built (npm run build)")
    up = subprocess.Popen(
        ["node", bin_js, "up", "--port", "0", "--data", str(tmp_path / "data"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = _read_until(up.stdout, "listening on")
    except AssertionError:
        up.kill()
        raise
    return up, line.split("listening on ")[1].split()[0]


def _wait_for_events(base, n):
    deadline = time.time() + 60
    while True:
        health = json.load(urllib.request.urlopen(base + "/healthz", timeout=5))
        if health["pipeline"]["events"] >= n or time.time() > deadline:
            return health["pipeline"]
        time.sleep(0.2)


def test_through_rankwatch_up_no_dead_letters(tmp_path):
    """The hook's events pass the v1 contract of the real server (skipped when not built)."""
    up, base = _start_up(tmp_path)
    try:
        run_loop(base + "/v1/ingest", "--steps", "12")
        pipeline = _wait_for_events(base, 1 + 12 + 1)
        assert pipeline["events"] == 1 + 12 + 1  # job, steps, one checkpoint
        assert pipeline["dead_letters"] == 0
    finally:
        up.terminate()
        up.wait(60)


def test_a_server_that_takes_fewer_events_a_request_gets_them_all(tmp_path):
    """`up` refuses requests over 4 events (413): the hook halves its batches until they fit."""
    up, base = _start_up(tmp_path, "--ingest-max-events", "4")
    try:
        run_loop(base + "/v1/ingest", "--steps", "30")
        pipeline = _wait_for_events(base, 1 + 30 + 3)
        assert pipeline["events"] == 1 + 30 + 3  # the job, 30 steps, 3 checkpoints
        assert pipeline["dead_letters"] == 0
    finally:
        up.terminate()
        up.wait(60)


def test_an_event_too_large_alone_is_refused_and_the_rest_go_on():
    """A receiver with a byte limit per line: the oversized event is counted, the others all arrive in order."""
    sys.path.insert(0, os.path.join(HERE, ".."))
    from rankwatch_hook._sender import Sender

    rx = Receiver(max_line_bytes=200)
    sender = Sender(rx.url, flush_interval=0.05)
    try:
        for i in range(20):
            sender.put({"kind": "step", "step": i, "pad": "x" * (500 if i == 7 else 10)})
        deadline = time.time() + 30
        while sender.counters()["waiting"] and time.time() < deadline:
            time.sleep(0.05)
        sender.close()
    finally:
        rx.close()
    assert [e["step"] for e in rx.events] == [i for i in range(20) if i != 7]
    c = sender.counters()
    assert (c["sent"], c["refused"], c["dropped"], c["failed_posts"]) == (19, 1, 0, 0)


def test_through_the_node_collector(tmp_path):
    """hook → the collector's local /v1/ingest (loopback) → rankwatch up."""
    up, base = _start_up(tmp_path)
    collector = None
    try:
        collector = subprocess.Popen(
            ["node", os.path.join(REPO, "bin", "rankwatch.js"), "collect", "--bus", base, "--health-port", "0", "--flush-ms", "200"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = _read_until(collector.stderr, "health on ")
        # "health on http://127.0.0.1:N/healthz, http://127.0.0.1:N/metrics": the base URL.
        local = re.search(r"health on (https?://[^/\s,]+)", line).group(1)
        run_loop(local + "/v1/ingest", "--steps", "12")
        pipeline = _wait_for_events(base, 1 + 12 + 1)
        assert pipeline["events"] == 1 + 12 + 1
        assert pipeline["dead_letters"] == 0
        metrics = urllib.request.urlopen(local + "/metrics", timeout=5).read().decode()
        assert "rankwatch_collector_events_sent_total 14" in metrics
    finally:
        if collector is not None:
            collector.terminate()
            collector.wait(60)
        up.terminate()
        up.wait(60)


def _hook(**kw):
    sys.path.insert(0, os.path.join(HERE, ".."))
    from rankwatch_hook import Hook

    # An endpoint nobody listens on: the events stay queued, which is all these tests read.
    return Hook(
        "layout-job", endpoint="http://127.0.0.1:%d/v1/ingest" % free_port(), send_job=True, flush_interval=60.0, **kw
    )


def _job(hook):
    with hook.sender._lock:
        queued = list(hook.sender._queue)
    hook.shutdown(timeout=0.1)
    return next(e for e in queued if e["kind"] == "job")


def test_layout_fills_dp_and_the_stage_from_the_world(capsys):
    # Rank 40 of 64 with tp 8, pp 2: dp is what is left (4) and the rank sits in stage 1.
    h = _hook(rank=40, world_size=64, parallel={"tp": 8, "pp": 2}, gpu_model="H100-SXM")
    assert h.stage == 1
    job = _job(h)
    assert job["parallel"] == {"tp": 8, "pp": 2, "cp": 1, "dp": 4}
    assert "parallel_assumed" not in job
    assert capsys.readouterr().err == ""


def test_a_missing_layout_is_said_not_guessed_silently(capsys):
    job = _job(_hook(rank=0, world_size=16, gpu_model="H100-SXM"))
    assert job["parallel"] == {"tp": 1, "pp": 1, "cp": 1, "dp": 16}
    assert job["parallel_assumed"] is True
    err = capsys.readouterr().err
    assert "no parallel=" in err and "tp*pp*cp times over" in err


def test_a_layout_that_does_not_multiply_up_is_said(capsys):
    _job(_hook(rank=0, world_size=64, parallel={"tp": 8, "pp": 2, "dp": 8}, gpu_model="H100-SXM"))
    assert "tp*pp*cp*dp = 128 but the world size is 64" in capsys.readouterr().err
