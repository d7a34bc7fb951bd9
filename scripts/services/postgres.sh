#!/usr/bin/env bash
# PostgreSQL for the tests on 127.0.0.1:5432 (any version >= 15), in this order:
#  1. a server already answering there, where the current user logs in to database `test`
#     without a password, is reused as it is;
#  2. a Debian cluster configured on that port but stopped is started (pg_ctlcluster);
#  3. else a cluster of our own is made in the cache (initdb, trust auth on 127.0.0.1 only,
#     user postgres, database test) with the machine's PostgreSQL binaries, installing
#     Debian's `postgresql` package first if there are none.
#
#   postgres.sh [start]   as above; print the URL
#   postgres.sh stop      stop what (2) or (3) started; a reused server is left alone
#   postgres.sh status    exit 0 and print the URL when it answers
#
# Environment: POTATOQ_POSTGRES_PORT (5432), POTATOQ_POSTGRES_TIMEOUT (60 s).
SVC=postgres
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PORT=${POTATOQ_POSTGRES_PORT:-5432}
TIMEOUT=${POTATOQ_POSTGRES_TIMEOUT:-60}
MACHINE_URL="postgresql://127.0.0.1:$PORT/test"
OWN_URL="postgresql://postgres@127.0.0.1:$PORT/test"
OWN_DIR=$CACHE/postgres-$PORT
# Set when (2) started a Debian cluster: "VERSION NAME", so that stop stops only that.
CLUSTER_MARK=$RUN_DIR/$SVC-$PORT.cluster

# as_owner CMD...: run a PostgreSQL tool as the owner of our cluster (initdb refuses root).
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

newest_bin() {
  local dirs=(/usr/lib/postgresql/*/bin)
  [ -d "${dirs[0]}" ] && printf '%s\n' "${dirs[@]}" | sort -V | tail -n 1
}

own_cluster_runs() {
  local bin
  bin=$(newest_bin)
  [ -n "$bin" ] && [ -f "$OWN_DIR/data/PG_VERSION" ] && as_owner "$bin/pg_ctl" status -D "$OWN_DIR/data" >/dev/null 2>&1
}

# debian_cluster_on_port: "VERSION NAME STATUS" of a Debian cluster configured on $PORT.
debian_cluster_on_port() {
  command -v pg_lsclusters >/dev/null || return 1
  pg_lsclusters --no-header 2>/dev/null | awk -v port="$PORT" '$3 == port {print $1, $2, $4; exit}' | grep .
}

install_binaries() {
  local before after version name
  before=$(pg_lsclusters --no-header 2>/dev/null | awk '{print $1 "/" $2}' || true)
  apt_install postgresql
  # The package makes (and may start) a cluster "main" with password auth on 5432; it is new
  # and empty, and it would take the port from ours: drop it.
  after=$(pg_lsclusters --no-header 2>/dev/null | awk '{print $1 "/" $2}' || true)
  for cluster in $after; do
    grep -qxF "$cluster" <<<"$before" && continue
    version=${cluster%/*} name=${cluster#*/}
    say "dropping the empty cluster $version/$name the package just made (ours takes its place)"
    pg_dropcluster --stop "$version" "$name"
  done
}

start_own_cluster() {
  local bin started=$SECONDS
  bin=$(newest_bin)
  if [ -z "$bin" ]; then
    install_binaries
    bin=$(newest_bin)
    [ -n "$bin" ] || fail "no PostgreSQL binaries in /usr/lib/postgresql/*/bin after installing postgresql"
  fi
  mkdir -p "$OWN_DIR"
  [ "$(id -u)" = 0 ] && chown postgres: "$OWN_DIR"
  if [ ! -f "$OWN_DIR/data/PG_VERSION" ]; then
    say "creating a cluster in $OWN_DIR/data ($("$bin/postgres" --version))"
    as_owner "$bin/initdb" -D "$OWN_DIR/data" -U postgres --auth=trust -E UTF8 --no-instructions \
      >"$OWN_DIR/initdb.log" 2>&1 || { cat "$OWN_DIR/initdb.log" >&2; fail "initdb failed"; }
  fi
  say "starting it on 127.0.0.1:$PORT ..."
  as_owner "$bin/pg_ctl" start -D "$OWN_DIR/data" -l "$OWN_DIR/server.log" -w -t "$TIMEOUT" \
    -o "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories='$OWN_DIR' -c fsync=off" \
    >/dev/null || { tail -n 30 "$OWN_DIR/server.log" >&2; fail "pg_ctl start failed (log: $OWN_DIR/server.log)"; }
  if ! probe "$OWN_URL" >/dev/null 2>&1; then
    as_owner "$bin/createdb" -h 127.0.0.1 -p "$PORT" -U postgres test
  fi
  probe "$OWN_URL" >/dev/null || fail "the cluster in $OWN_DIR runs but $OWN_URL does not log in"
  say "started in $((SECONDS - started)) s (log: $OWN_DIR/server.log)"
  echo "$OWN_URL"
}

start() {
  if own_cluster_runs; then
    say "$(probe "$OWN_URL") already running (started by these scripts)"
    echo "$OWN_URL"
    return 0
  fi
  local found rc=0 cluster
  found=$(probe "$MACHINE_URL" 2>"$RUN_DIR/$SVC-$PORT.probe") || rc=$?
  if [ "$rc" = 1 ] && cluster=$(debian_cluster_on_port); then
    local version=${cluster%% *} name
    name=$(cut -d' ' -f2 <<<"$cluster")
    need_root "starting the Debian cluster $version/$name on port $PORT"
    say "starting the machine's cluster $version/$name (configured on port $PORT, was down) ..."
    pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start
    echo "$version $name" >"$CLUSTER_MARK"
    rc=0
    found=$(probe "$MACHINE_URL" 2>"$RUN_DIR/$SVC-$PORT.probe") || rc=$?
  fi
  case $rc in
    0)
      say "$found on port $PORT: using it ($([ -f "$CLUSTER_MARK" ] && echo "started by these scripts" || echo "not started by these scripts: left alone by stop"))"
      echo "$MACHINE_URL"
      ;;
    1) start_own_cluster ;;
    *) fail "$(cat "$RUN_DIR/$SVC-$PORT.probe"). Let the current user log in to database 'test' without a password, point POTATOQ_TEST_POSTGRES_URL at a server that does, or set POTATOQ_POSTGRES_PORT for a cluster of our own" ;;
  esac
}

stop() {
  local bin
  bin=$(newest_bin)
  if own_cluster_runs; then
    as_owner "$bin/pg_ctl" stop -D "$OWN_DIR/data" -m fast -w >/dev/null
    say "stopped (port $PORT)"
  elif [ -f "$CLUSTER_MARK" ]; then
    # shellcheck disable=SC2046  # "VERSION NAME"
    pg_ctlcluster --skip-systemctl-redirect $(cat "$CLUSTER_MARK") stop
    rm -f "$CLUSTER_MARK"
    say "stopped the machine's cluster it had started (port $PORT)"
  else
    say "not started by these scripts on port $PORT: nothing to stop"
  fi
}

case ${1:-start} in
  start) start ;;
  stop) stop ;;
  status)
    if own_cluster_runs && probe "$OWN_URL" >/dev/null; then echo "$OWN_URL"
    elif probe "$MACHINE_URL" >/dev/null; then echo "$MACHINE_URL"
    else exit 3; fi
    ;;
  *) fail "usage: $0 [start|stop|status]" ;;
esac
