"""Background sender: a bounded queue drained by a daemon thread into gzip JSON-lines POSTs."""

import gzip
import json
import threading
import time
import urllib.error
import urllib.request
from collections import deque

MAX_BATCH = 5000


class Sender:
    def __init__(self, endpoint, token=None, flush_interval=1.0, max_queue=20000, timeout=2.0):
        self.endpoint = endpoint
        self.token = token
        self.flush_interval = flush_interval
        self.timeout = timeout
        self._queue = deque()
        self._max = max_queue
        self._wake = threading.Event()
        self._closing = False
        self._lock = threading.Lock()
        self._c = {
            "queued": 0,
            "sent": 0,
            "dropped": 0,
            "rejected": 0,
            "refused": 0,
            "failed_posts": 0,
            "hook_errors": 0,
        }
        self._thread = threading.Thread(target=self._run, name="rankwatch-hook", daemon=True)
        self._thread.start()

    def put(self, event):
        """Called on the training thread: O(1), never blocks on the network."""
        with self._lock:
            if len(self._queue) >= self._max:
                self._queue.popleft()
                self._c["dropped"] += 1
            self._queue.append(event)
            self._c["queued"] += 1

    def count(self, name):
        with self._lock:
            self._c[name] = self._c.get(name, 0) + 1

    def counters(self):
        with self._lock:
            return dict(self._c, waiting=len(self._queue))

    def close(self, timeout=2.0):
        self._closing = True
        self._wake.set()
        self._thread.join(timeout)

    def _take(self):
        with self._lock:
            n = min(len(self._queue), MAX_BATCH)
            return [self._queue.popleft() for _ in range(n)]

    def _give_back(self, batch):
        with self._lock:
            room = self._max - len(self._queue)
            if room < len(batch):
                self._c["dropped"] += len(batch) - room
                batch = batch[len(batch) - room :] if room > 0 else []
            self._queue.extendleft(reversed(batch))

    def _run(self):
        failures = 0
        while True:
            wait = self.flush_interval if failures == 0 else min(30.0, self.flush_interval * 2**failures)
            self._wake.wait(wait)
            self._wake.clear()
            closing = self._closing
            while True:
                batch = self._take()
                if not batch:
                    break
                unsent = self._send(batch)
                if not unsent:
                    failures = 0
                    continue
                failures += 1
                if closing:
                    with self._lock:
                        self._c["dropped"] += len(unsent)
                else:
                    self._give_back(unsent)
                break
            if closing:
                return

    def _send(self, batch):
        """Posts the batch, halving it while the server says it is too large (413); returns what
        is still to send after a failure that may pass (endpoint away, 5xx, 429, a bad token)."""
        status = self._post(batch)
        if status != 413:
            return [] if status else batch
        if len(batch) == 1:
            # One event over the server's limit on its own: retrying cannot help, and it must not
            # hold back the events behind it.
            with self._lock:
                self._c["refused"] += 1
            return []
        half = (len(batch) + 1) // 2
        unsent = self._send(batch[:half])
        return unsent + batch[half:] if unsent else self._send(batch[half:])

    def _post(self, batch):
        """True when the server took the batch, 413 when it is too large, False otherwise."""
        body = gzip.compress("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in batch).encode())
        headers = {"Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.endpoint, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as res:
                res.read()
            with self._lock:
                self._c["sent"] += len(batch)
            return True
        except urllib.error.HTTPError as err:
            if err.code == 400:
                # Some lines were bad: the server kept the good ones. Retrying cannot help.
                try:
                    reply = json.loads(err.read() or b"{}")
                except ValueError:
                    reply = {}
                with self._lock:
                    self._c["sent"] += int(reply.get("accepted", 0))
                    self._c["rejected"] += int(reply.get("rejected", len(batch)))
                return True
            if err.code == 413:
                return 413
            with self._lock:
                self._c["failed_posts"] += 1
            return False
        except Exception:  # noqa: BLE001 - refused, timed out, DNS: the endpoint is away
            with self._lock:
                self._c["failed_posts"] += 1
            time.sleep(0)
            return False
