#!/usr/bin/env bash
# Installs Debian packages for the scripts that need them (alertmanager.sh, slurm.sh, the browser
# tests' Chromium), waiting for another apt-get or dpkg (unattended-upgrades, a parallel CI job)
# instead of failing on its lock. DPkg::Lock::Timeout makes apt-get wait for dpkg's locks; the lock
# `apt-get update` takes on the package lists is not covered by it (apt-pkg/acquire.cc takes it
# without waiting), so update is tried again while another process holds that one.
#
#   deploy/apt-install.sh [apt-get install options] PACKAGE...
#
# Environment: APT_LOCK_WAIT (seconds to wait for a lock, default 300).
set -euo pipefail

WAIT="${APT_LOCK_WAIT:-300}"
APT=(apt-get -o "DPkg::Lock::Timeout=$WAIT")
export DEBIAN_FRONTEND=noninteractive

deadline=$((SECONDS + WAIT))
until out="$("${APT[@]}" update -qq 2>&1)"; do
  if ! grep -qE 'Could not get lock|Unable to lock' <<<"$out" || ((SECONDS >= deadline)); then
    printf '%s\n' "$out" >&2
    exit 1
  fi
  echo "apt-install.sh: another process holds apt's package lists lock; waiting" >&2
  sleep 2
done
[[ -z "$out" ]] || printf '%s\n' "$out" >&2
"${APT[@]}" install -y -qq "$@"
