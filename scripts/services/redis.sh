#!/usr/bin/env bash
# Redis >= 7 for the tests on 127.0.0.1:6379: a Redis already answering there is reused;
# else the machine's redis-server (Debian's `redis-server` package, installed if missing)
# is started with no persistence, its pid and log in the cache.
#
#   redis.sh [start]   as above; print the URL
#   redis.sh stop      stop it, if these scripts started it
#   redis.sh status    exit 0 and print the URL when it answers
#
# Environment: POTATOQ_REDIS_PORT (6379), POTATOQ_REDIS_TIMEOUT (30 s).
SVC=redis
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PORT=${POTATOQ_REDIS_PORT:-6379}
TIMEOUT=${POTATOQ_REDIS_TIMEOUT:-30}
URL="redis://127.0.0.1:$PORT/15"
LOG=$RUN_DIR/$SVC-$PORT.log

start() {
  owned_pid >/dev/null || forget_pid
  reuse_running "$URL" Redis 7 POTATOQ_REDIS_PORT
  if ! command -v redis-server >/dev/null; then
    apt_install redis-server
    # The package may have started its own service on 6379: then that one is reused.
    reuse_running "$URL" Redis 7 POTATOQ_REDIS_PORT
  fi
  local started=$SECONDS
  say "starting $(redis-server --version | grep -o 'v=[^ ]*') on 127.0.0.1:$PORT ..."
  mkdir -p "$CACHE/$SVC-$PORT"
  # In the foreground of a background job (not --daemonize), so that its PID is known at once.
  redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no \
    --dir "$CACHE/$SVC-$PORT" --daemonize no --logfile '' >"$LOG" 2>&1 </dev/null &
  remember_pid $!
  disown
  wait_ready "$URL" "$(owned_pid)" "$TIMEOUT" "$LOG"
  say "started in $((SECONDS - started)) s (log: $LOG)"
  echo "$URL"
}

case ${1:-start} in
  start) start ;;
  stop) stop_owned 10 ;;
  status)
    if probe "$URL" >/dev/null; then echo "$URL"; else exit 3; fi
    ;;
  *) fail "usage: $0 [start|stop|status]" ;;
esac
