"""Runs a command on a pseudo-terminal of its own (its controlling terminal, as a shell gives it),
posts a file of events to the /v1/ingest it prints, then closes the terminal as a closed window or
a dropped ssh session does. Prints the ingest reply and the command's exit status (negative: the
signal that ended it) as one JSON line. Usage: terminal-hangup.py EVENTS STDERR_FILE CMD..."""

import fcntl
import json
import os
import pty
import re
import select
import subprocess
import sys
import termios
import time
import urllib.request

events_file, stderr_file, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
master, slave = pty.openpty()


def take_terminal():
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


with open(stderr_file, "w") as err:
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=err, start_new_session=True, preexec_fn=take_terminal
    )
os.close(slave)
out = b""
deadline = time.time() + 120
while b"listening on" not in out and time.time() < deadline and proc.poll() is None:
    if select.select([master], [], [], 1)[0]:
        out += os.read(master, 4096)
url = re.search(rb"listening on (http://\S+)", out).group(1).decode()
with open(events_file, "rb") as f:
    req = urllib.request.Request(url + "/v1/ingest", data=f.read(), method="POST")
reply = json.loads(urllib.request.urlopen(req, timeout=120).read())
os.close(master)  # the terminal hangs up: SIGHUP to the command, its tty gone
print(json.dumps({"ingest": reply, "status": proc.wait(timeout=300)}))
