#!/usr/bin/env bash
# A real single-node Apache Kafka (KRaft, broker + controller in one JVM) on loopback, for tests,
# benchmarks and local use. Fetches the broker and its runtime jars from Maven Central through
# `mvn` on first use and caches them (~/.m2 and .cache/kafka/lib-VERSION), then needs no network.
#
#   deploy/kafka/kafka.sh start     start (or find running) and wait until it takes clients
#   deploy/kafka/kafka.sh stop      stop it (SIGTERM, then SIGKILL after 30 s); data is kept
#   deploy/kafka/kafka.sh status    exit 0 and print the address when it is up
#   deploy/kafka/kafka.sh fetch     only download the jars
#   deploy/kafka/kafka.sh clean     stop it and delete its data
#   deploy/kafka/kafka.sh cluster-id  print a fresh KRaft cluster id (what start formats with)
#
# Environment: KAFKA_PORT (default 19092; the controller takes the next port), KAFKA_VERSION
# (default 3.9.1), KAFKA_STATE (data, log and pid folder; default .cache/kafka/PORT),
# KAFKA_HEAP (default "-Xms256m -Xmx768m"), KAFKA_START_TIMEOUT (seconds, default 180).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VERSION="${KAFKA_VERSION:-3.9.1}"
PORT="${KAFKA_PORT:-19092}"
CPORT="$((PORT + 1))"
STATE="${KAFKA_STATE:-$ROOT/.cache/kafka/$PORT}"
LIB="$ROOT/.cache/kafka/lib-$VERSION"
PIDFILE="$STATE/kafka.pid"
LOG="$STATE/server.log"
HEAP="${KAFKA_HEAP:--Xms256m -Xmx768m}"
TIMEOUT="${KAFKA_START_TIMEOUT:-180}"

fetch() {
  [[ -f "$LIB/.complete" ]] && return 0
  command -v mvn >/dev/null || { echo "kafka.sh: mvn (Maven) is needed to fetch Kafka $VERSION" >&2; exit 1; }
  local work="$ROOT/.cache/kafka/pom-$VERSION"
  mkdir -p "$work" "$LIB"
  # A throwaway pom whose only job is to name the broker and a log backend for dependency resolution.
  cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>rankwatch.local</groupId><artifactId>kafka-broker</artifactId><version>$VERSION</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
POM
  echo "kafka.sh: fetching Apache Kafka $VERSION and its runtime jars with mvn (first run only)" >&2
  (cd "$work" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$LIB") >&2
  touch "$LIB/.complete"
}

# Cluster ids are 16 random bytes in URL-safe base64 without padding. Like Kafka's own
# Uuid.randomUuid, draw again when the id starts with '-': tools would read it as an option.
cluster_id() {
  local id="-"
  while [[ "$id" == -* ]]; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
  done
  echo "$id"
}

running() {
  [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}

start() {
  if running; then
    echo "127.0.0.1:$PORT"
    return 0
  fi
  if port_open; then
    echo "kafka.sh: 127.0.0.1:$PORT is taken by a process this script did not start (its state is in" \
      "$STATE); stop that process or choose another port with KAFKA_PORT" >&2
    exit 1
  fi
  command -v java >/dev/null || { echo "kafka.sh: java (17 or newer) is needed" >&2; exit 1; }
  fetch
  mkdir -p "$STATE/data"
  sed -e "s|@PORT@|$PORT|g" -e "s|@CONTROLLER_PORT@|$CPORT|g" -e "s|@DATA@|$STATE/data|g" \
    "$HERE/server.properties" >"$STATE/server.properties"
  local cp="$LIB/*"
  if [[ ! -f "$STATE/data/meta.properties" ]]; then
    local id
    id="$(cluster_id)"
    java -cp "$cp" -Dlog4j.configuration="file:$HERE/log4j.properties" kafka.tools.StorageTool \
      format --cluster-id="$id" -c "$STATE/server.properties" --ignore-formatted >"$STATE/format.log" 2>&1 ||
      { cat "$STATE/format.log" >&2; exit 1; }
  fi
  # shellcheck disable=SC2086
  nohup java $HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j.configuration="file:$HERE/log4j.properties" -cp "$cp" \
    kafka.Kafka "$STATE/server.properties" >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  local until=$((SECONDS + TIMEOUT))
  until grep -q "Kafka Server started" "$LOG" 2>/dev/null && port_open; do
    if ! running; then
      echo "kafka.sh: the broker exited during start; its log ($LOG) ends with:" >&2
      tail -n 30 "$LOG" >&2
      exit 1
    fi
    if ((SECONDS > until)); then
      echo "kafka.sh: the broker did not start within ${TIMEOUT}s; see $LOG" >&2
      exit 1
    fi
    sleep 0.3
  done
  echo "127.0.0.1:$PORT"
}

stop() {
  running || { rm -f "$PIDFILE"; return 0; }
  local pid
  pid="$(cat "$PIDFILE")"
  kill "$pid" 2>/dev/null || true
  local until=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS > until)); then
      kill -9 "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
  rm -f "$PIDFILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if running && port_open; then echo "127.0.0.1:$PORT"; else echo "kafka.sh: not running on $PORT" >&2; exit 1; fi ;;
  fetch) fetch ;;
  clean) stop; rm -rf "$STATE" ;;
  cluster-id) cluster_id ;;
  *) echo "usage: $0 start|stop|status|fetch|clean|cluster-id" >&2; exit 2 ;;
esac
