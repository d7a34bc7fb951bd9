#!/usr/bin/env bash
# Valkey 8 (trixie's valkey-server) for the tests, on 127.0.0.1:6380, beside any Redis on
# 6379. Keeps nothing on disk. A Valkey >= 8 already answering on the port is reused.
#
#   valkey.sh [start]   start unless running (builds the rootfs the first time); print the URL
#   valkey.sh stop      stop it, if these scripts started it
#   valkey.sh status    exit 0 and print the URL when it answers
#   valkey.sh url       print the URL
#
# Environment: POTATOQ_VALKEY_PORT (6380), POTATOQ_VALKEY_TIMEOUT (30 s).
SVC=valkey
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PORT=${POTATOQ_VALKEY_PORT:-6380}
TIMEOUT=${POTATOQ_VALKEY_TIMEOUT:-30}
URL="redis://127.0.0.1:$PORT/0"
LOG=$RUN_DIR/$SVC-$PORT.log

start() {
  owned_pid >/dev/null || forget_pid
  reuse_running "$URL" Valkey 8 POTATOQ_VALKEY_PORT
  need_root "starting Valkey"
  ensure_rootfs
  local started=$SECONDS
  say "starting Valkey $(dpkg-query --admindir="$ROOTFS/var/lib/dpkg" -W -f='${Version}' valkey-server) on 127.0.0.1:$PORT ..."
  spawn_in_rootfs "$LOG" valkey /usr/bin/valkey-server --bind 127.0.0.1 --port "$PORT" \
    --save '' --appendonly no --dir /tmp --daemonize no --logfile ''
  wait_ready "$URL" "$(owned_pid)" "$TIMEOUT" "$LOG"
  say "started in $((SECONDS - started)) s (log: $LOG)"
  echo "$URL"
}

stop() {
  local pid
  if pid=$(owned_pid); then
    stop_owned 10 "$(namespace_init "$pid")"  # valkey-server itself: it exits on SIGTERM
  else
    stop_owned 0
  fi
}

case ${1:-start} in
  start) start ;;
  stop) stop ;;
  status)
    if probe "$URL" >/dev/null; then echo "$URL"; else exit 3; fi
    ;;
  url) echo "$URL" ;;
  *) fail "usage: $0 [start|stop|status|url]" ;;
esac
