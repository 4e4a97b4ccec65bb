#!/usr/bin/env bash
# A real Prometheus Alertmanager (Debian's prometheus-alertmanager, 0.25) on loopback, for tests
# and local use: a minimal config (one receiver that sends nowhere), its own storage folder, no
# cluster gossip. Installs the package with apt-get when it is missing and we are root.
#
#   deploy/alertmanager/alertmanager.sh start    start (or find running) and wait until /-/ready
#   deploy/alertmanager/alertmanager.sh stop     stop it (SIGTERM, then SIGKILL after 10 s)
#   deploy/alertmanager/alertmanager.sh status   exit 0 and print the URL when it is up
#   deploy/alertmanager/alertmanager.sh clean    stop it and delete its state
#
# Environment: AM_PORT (default 19093), AM_STATE (config, storage, log and pid; default
# .cache/alertmanager/PORT), AM_RESOLVE_TIMEOUT (default 5m).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PORT="${AM_PORT:-19093}"
STATE="${AM_STATE:-$ROOT/.cache/alertmanager/$PORT}"
PIDFILE="$STATE/alertmanager.pid"
LOG="$STATE/alertmanager.log"
URL="http://127.0.0.1:$PORT"

binary() {
  for b in prometheus-alertmanager alertmanager; do
    command -v "$b" >/dev/null && { command -v "$b"; return 0; }
  done
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "alertmanager.sh: installing prometheus-alertmanager with apt-get (first run only)" >&2
    "$HERE/../apt-install.sh" prometheus-alertmanager >&2
    command -v prometheus-alertmanager && return 0
  fi
  echo "alertmanager.sh: prometheus-alertmanager is not installed; apt-get install prometheus-alertmanager" >&2
  exit 1
}

running() { [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }
ready() { curl -fsS "$URL/-/ready" >/dev/null 2>&1; }

start() {
  if running && ready; then echo "$URL"; return 0; fi
  local bin; bin="$(binary)"
  mkdir -p "$STATE/data"
  cat >"$STATE/alertmanager.yml" <<YML
global:
  resolve_timeout: ${AM_RESOLVE_TIMEOUT:-5m}
route:
  receiver: nowhere
  group_by: ['alertname', 'host']
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: nowhere
YML
  # The package's own service is not used: this one is ours, on loopback, with its own storage.
  nohup "$bin" --config.file="$STATE/alertmanager.yml" --storage.path="$STATE/data" \
    --web.listen-address="127.0.0.1:$PORT" --cluster.listen-address= >"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 100); do
    if ready; then echo "$URL"; return 0; fi
    running || { echo "alertmanager.sh: it exited; see $LOG" >&2; tail -5 "$LOG" >&2; exit 1; }
    sleep 0.2
  done
  echo "alertmanager.sh: not ready after 20 s; see $LOG" >&2
  exit 1
}

stop() {
  running || return 0
  local pid; pid="$(cat "$PIDFILE")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if running && ready; then echo "$URL"; else echo "alertmanager.sh: not running on $PORT" >&2; exit 1; fi ;;
  clean) stop; rm -rf "$STATE" ;;
  *) echo "usage: $0 start|stop|status|clean" >&2; exit 2 ;;
esac
