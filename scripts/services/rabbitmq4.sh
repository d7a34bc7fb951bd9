#!/usr/bin/env bash
# RabbitMQ 4 (trixie's rabbitmq-server, Erlang 27) for the tests, on 127.0.0.1:5673, beside
# any system RabbitMQ on 5672. A RabbitMQ >= 4 already answering on the port is reused.
#
#   rabbitmq4.sh [start]   start unless running (builds the rootfs the first time); print the URL
#   rabbitmq4.sh stop      stop it, if these scripts started it
#   rabbitmq4.sh status    exit 0 and print the URL when it answers
#   rabbitmq4.sh url       print the URL
#   rabbitmq4.sh ctl ARGS  rabbitmqctl ARGS against a node these scripts started
#
# Each port is its own node (name, Erlang ports, data and logs), so several can run at once:
#   POTATOQ_RABBITMQ4_PORT       AMQP port               (5673)
#   POTATOQ_RABBITMQ4_DIST_PORT  Erlang distribution     (AMQP port + 20000)
#   POTATOQ_RABBITMQ4_EPMD_PORT  the node's own epmd     (AMQP port - 1303: 5673 -> 4370)
#   POTATOQ_RABBITMQ4_NODE       node name               (potatoq-rabbit-PORT@localhost)
#   POTATOQ_RABBITMQ4_TIMEOUT    seconds to boot         (120)
SVC=rabbitmq4
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PORT=${POTATOQ_RABBITMQ4_PORT:-5673}
DIST_PORT=${POTATOQ_RABBITMQ4_DIST_PORT:-$((PORT + 20000))}
EPMD_PORT=${POTATOQ_RABBITMQ4_EPMD_PORT:-$((PORT - 1303))}
NODE=${POTATOQ_RABBITMQ4_NODE:-potatoq-rabbit-$PORT@localhost}
TIMEOUT=${POTATOQ_RABBITMQ4_TIMEOUT:-120}
URL="amqp://guest:guest@127.0.0.1:$PORT/"
# The node's files, inside the rootfs: config, data (mnesia) and logs, one folder per port.
NODE_DIR=/var/lib/potatoq/rabbitmq-$PORT
LOG=$RUN_DIR/$SVC-$PORT.log

# The node's settings as environment variables: nothing in the rootfs's /etc is shared
# between nodes, so nodes on other ports never see each other's settings.
node_env() {
  echo HOME=/var/lib/rabbitmq \
    RABBITMQ_NODENAME="$NODE" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$PORT" \
    RABBITMQ_DIST_PORT="$DIST_PORT" \
    RABBITMQ_CONF_ENV_FILE="$NODE_DIR/rabbitmq-env.conf" \
    RABBITMQ_CONFIG_FILE="$NODE_DIR/rabbitmq.conf" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$NODE_DIR/advanced.config" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$NODE_DIR/enabled_plugins" \
    RABBITMQ_MNESIA_BASE="$NODE_DIR/mnesia" \
    RABBITMQ_LOG_BASE="$NODE_DIR/log" \
    ERL_EPMD_PORT="$EPMD_PORT" \
    ERL_EPMD_ADDRESS=127.0.0.1
}

write_node_files() {
  local dir=$ROOTFS$NODE_DIR
  mkdir -p "$dir/mnesia" "$dir/log"
  : >"$dir/rabbitmq-env.conf"
  echo '[].' >"$dir/enabled_plugins"
  cat >"$dir/rabbitmq.conf" <<EOF
# written by potatoq scripts/services/rabbitmq4.sh on every start
listeners.tcp.default = 127.0.0.1:$PORT
EOF
  in_rootfs root chown -R rabbitmq:rabbitmq "$NODE_DIR"
}

start() {
  owned_pid >/dev/null || forget_pid
  reuse_running "$URL" RabbitMQ 4 POTATOQ_RABBITMQ4_PORT
  need_root "starting RabbitMQ 4"
  local port
  for port in "$DIST_PORT" "$EPMD_PORT"; do
    if port_taken "$port"; then
      fail "port $port (Erlang distribution/epmd of this node) is in use; set POTATOQ_RABBITMQ4_DIST_PORT / POTATOQ_RABBITMQ4_EPMD_PORT"
    fi
  done
  ensure_rootfs
  write_node_files
  local started=$SECONDS version
  version=$(dpkg-query --admindir="$ROOTFS/var/lib/dpkg" -W -f='${Version}' rabbitmq-server)
  say "starting RabbitMQ $version as $NODE on 127.0.0.1:$PORT ..."
  # shellcheck disable=SC2046  # node_env prints words without spaces
  spawn_in_rootfs "$LOG" rabbitmq $(node_env) \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    /usr/lib/rabbitmq/bin/rabbitmq-server
  wait_ready "$URL" "$(owned_pid)" "$TIMEOUT" "$LOG"
  say "started in $((SECONDS - started)) s (log: $LOG and $ROOTFS$NODE_DIR/log)"
  echo "$URL"
}

stop() {
  local pid
  if pid=$(owned_pid); then
    # The namespace's init is the rabbitmq-server script: on SIGTERM it stops the node cleanly.
    stop_owned 60 "$(namespace_init "$pid")"
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
  ctl)
    shift
    owned_pid >/dev/null || fail "no node started by these scripts on port $PORT"
    # shellcheck disable=SC2046
    in_rootfs rabbitmq $(node_env) RABBITMQ_CTL_ERL_ARGS="-start_epmd false" /usr/lib/rabbitmq/bin/rabbitmqctl "$@"
    ;;
  *) fail "usage: $0 [start|stop|status|url|ctl ARGS]" ;;
esac
