#!/usr/bin/env bash
# A real one-machine Slurm cluster (Debian's slurmctld + slurmd, 22.05) on loopback, for the
# cordon driver's tests: a config written here (auth/none, so no munge key is needed), two
# nodes served by slurmd processes on this machine, its own state folder. Installs the packages
# with apt-get when missing and we are root (slurmd must run as root).
#
#   deploy/slurm/slurm.sh start    start and wait until both nodes answer; prints SLURM_CONF's path
#   deploy/slurm/slurm.sh stop     stop the daemons this script started
#   deploy/slurm/slurm.sh status   exit 0 and print SLURM_CONF's path when slurmctld answers
#
# Environment: SLURM_PORT (slurmctld's port; slurmd take the next two; default 16817),
# SLURM_STATE (default .cache/slurm/PORT), SLURM_NODES (default "rwnode1 rwnode2").
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PORT="${SLURM_PORT:-16817}"
STATE="${SLURM_STATE:-$ROOT/.cache/slurm/$PORT}"
NODES="${SLURM_NODES:-rwnode1 rwnode2}"
CONF="$STATE/slurm.conf"
export SLURM_CONF="$CONF"

need() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v scontrol >/dev/null && return 0
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "slurm.sh: installing slurmctld and slurmd with apt-get (first run only)" >&2
    "$HERE/../apt-install.sh" slurmctld slurmd >&2
    return 0
  fi
  echo "slurm.sh: slurmctld and slurmd are not installed; apt-get install slurmctld slurmd" >&2
  exit 1
}

up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

pids() { cat "$STATE"/*.pid 2>/dev/null || true; }

start() {
  if [[ -f "$CONF" ]] && up; then echo "$CONF"; return 0; fi
  need
  [[ "$(id -u)" == 0 ]] || { echo "slurm.sh: slurmd must run as root" >&2; exit 1; }
  mkdir -p "$STATE/ctld" "$STATE/spool"
  local i=0 nodelines=""
  for n in $NODES; do
    i=$((i + 1))
    nodelines+="NodeName=$n NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$((PORT + i)) CPUs=1 RealMemory=100 State=UNKNOWN"$'\n'
  done
  cat >"$CONF" <<CONF
ClusterName=rankwatch-test
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmctldPort=$PORT
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/linear
ReturnToService=2
SchedulerType=sched/builtin
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
$nodelines
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  slurmctld -f "$CONF" -i
  for n in $NODES; do mkdir -p "$STATE/spool/$n"; slurmd -f "$CONF" -N "$n"; done
  for _ in $(seq 1 100); do
    if up && ! sinfo -h -o '%T' 2>/dev/null | grep -qiE 'unk|down|not_responding'; then echo "$CONF"; return 0; fi
    sleep 0.2
  done
  echo "slurm.sh: nodes not up after 20 s; see $STATE/*.log" >&2
  sinfo >&2 || true
  tail -5 "$STATE"/slurmctld.log >&2 || true
  exit 1
}

stop() {
  for p in $(pids); do kill "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in $(pids); do kill -9 "$p" 2>/dev/null || true; done
  rm -f "$STATE"/*.pid
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if [[ -f "$CONF" ]] && up; then echo "$CONF"; else echo "slurm.sh: not running on $PORT" >&2; exit 1; fi ;;
  clean) stop; rm -rf "$STATE" ;;
  *) echo "usage: $0 start|stop|status|clean" >&2; exit 2 ;;
esac
