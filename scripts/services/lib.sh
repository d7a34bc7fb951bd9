# shellcheck shell=bash
# Sourced by the service scripts of this folder. What they share:
#  - a running server on the service's port is probed (probe.py) and reused, never restarted;
#  - what these scripts start is recorded under $CACHE/run, and only that is ever stopped;
#  - RabbitMQ 4 and Valkey 8 come from a Debian 13 (trixie) root filesystem built once with
#    mmdebstrap (Debian 12's glibc is too old for trixie's Erlang 27) and run from it with
#    chroot, each in private PID and mount namespaces, so nothing of theirs lands on the host
#    and everything in the namespace dies with it.
#
# Environment: POTATOQ_SERVICES_CACHE (default /var/cache/potatoq-services as root, else
# ~/.cache/potatoq-services), POTATOQ_DEBIAN_MIRROR (http://deb.debian.org/debian).
set -euo pipefail

SERVICES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ "$(id -u)" = 0 ]; then
  CACHE=${POTATOQ_SERVICES_CACHE:-/var/cache/potatoq-services}
else
  CACHE=${POTATOQ_SERVICES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/potatoq-services}
fi
RUN_DIR=$CACHE/run
MIRROR=${POTATOQ_DEBIAN_MIRROR:-http://deb.debian.org/debian}
ROOTFS=$CACHE/trixie-rootfs
# Changing the package list must change this line: a rootfs with another stamp is rebuilt.
ROOTFS_STAMP="potatoq-services 1: trixie rabbitmq-server valkey-server"
ROOTFS_PACKAGES=rabbitmq-server,valkey-server,ca-certificates

say() { echo "$SVC: $*" >&2; }
fail() { echo "$SVC: ERROR: $*" >&2; exit 1; }

need_root() {
  [ "$(id -u)" = 0 ] || fail "$1 needs root (mmdebstrap, chroot, unshare): run it with sudo"
}

# probe URL: "PRODUCT VERSION" on stdout; exit 1 when nothing listens, 2 when something
# else does (its reason on stderr).
probe() { python3 "$SERVICES_DIR/probe.py" "$1"; }

# port_taken PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_taken() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# reuse_running URL PRODUCT MIN_MAJOR PORT_VARIABLE: when a server answers at URL, print URL
# and exit 0 if it is PRODUCT >= MIN_MAJOR, else fail naming what holds the port. Returns
# (status 0) only when nothing listens there, i.e. the caller should start one.
reuse_running() {
  local url=$1 product=$2 major=$3 knob=$4 found rc=0
  found=$(probe "$url" 2>"$RUN_DIR/$SVC-$PORT.probe") || rc=$?
  case $rc in
    0) ;;
    1) return 0 ;;
    *) fail "the port of $url is taken by something unusable: $(cat "$RUN_DIR/$SVC-$PORT.probe"); set $knob" ;;
  esac
  local got_product=${found%% *} got_major=${found#* }
  got_major=${got_major%%.*}
  case $got_major in '' | *[!0-9]*) got_major=0 ;; esac
  if [ "$got_product" != "$product" ] || [ "$got_major" -lt "$major" ]; then
    fail "the port of $url holds $found, not $product >= $major; set $knob to use another port"
  fi
  if owned_pid >/dev/null; then
    say "$found already running (started by these scripts)"
  else
    say "$found already running (not started by these scripts: reused, and left alone by stop)"
  fi
  echo "$url"
  exit 0
}

# wait_ready URL PID TIMEOUT LOG: until URL answers; fail (showing LOG) if PID dies or time runs out.
wait_ready() {
  local url=$1 pid=$2 timeout=$3 log=$4 started=$SECONDS
  until probe "$url" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$log" >&2 || true
      forget_pid
      fail "it exited while starting (log above: $log)"
    fi
    if ((SECONDS - started >= timeout)); then
      tail -n 30 "$log" >&2 || true
      fail "not answering at $url after ${timeout}s (pid $pid still runs; '$0 stop' stops it)"
    fi
    sleep 0.2
  done
}

# --- pidfiles: "PID START_TIME", so a recycled PID is never mistaken for ours -----------------

pidfile() { echo "$RUN_DIR/$SVC-$PORT.pid"; }

start_time_of() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null; }

remember_pid() { echo "$1 $(start_time_of "$1")" >"$(pidfile)"; }

forget_pid() { rm -f "$(pidfile)"; }

# owned_pid: print the PID of the process these scripts started for $SVC on $PORT, if alive.
owned_pid() {
  local pid started
  [ -f "$(pidfile)" ] && read -r pid started <"$(pidfile)" || return 1
  [ -n "$pid" ] && [ "$(start_time_of "$pid")" = "$started" ] || return 1
  echo "$pid"
}

# stop_owned GRACE [PID_TO_SIGNAL]: SIGTERM (to PID_TO_SIGNAL, default the owned PID), wait up
# to GRACE seconds for the owned PID to exit, then SIGKILL it.
stop_owned() {
  local grace=$1 pid target i
  if ! pid=$(owned_pid); then
    forget_pid
    say "not started by these scripts on port $PORT: nothing to stop"
    return 0
  fi
  target=${2:-$pid}
  kill -TERM "$target" 2>/dev/null || true
  for ((i = 0; i < grace * 5; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "still running ${grace}s after SIGTERM: killing it"
    kill -KILL "$target" "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  forget_pid
  say "stopped (port $PORT)"
}

# --- Debian packages on the host ----------------------------------------------------------------

# apt_install PACKAGE...: install from the machine's Debian/Ubuntu repositories (root only).
apt_install() {
  [ "$(id -u)" = 0 ] || fail "$* missing: install it (sudo apt-get install $*) or run this as root"
  command -v apt-get >/dev/null || fail "$* missing and this is not a Debian/Ubuntu machine: install it"
  say "installing $* from Debian packages ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "$@" >"$CACHE/apt.log" 2>&1 ||
    { apt-get update -q >>"$CACHE/apt.log" 2>&1 && apt-get install -y -q "$@" >>"$CACHE/apt.log" 2>&1; } ||
    { tail -n 20 "$CACHE/apt.log" >&2; fail "apt-get install $* failed (log: $CACHE/apt.log)"; }
}

# --- the trixie rootfs -------------------------------------------------------------------------

ensure_rootfs() {
  [ "$(cat "$ROOTFS/.stamp" 2>/dev/null)" = "$ROOTFS_STAMP" ] && return 0
  # One build at a time: rabbitmq4.sh and valkey.sh started together build it once.
  exec 8>"$CACHE/rootfs.lock"
  flock -w 900 8 || fail "another build of $ROOTFS did not finish within 15 minutes"
  if [ "$(cat "$ROOTFS/.stamp" 2>/dev/null)" = "$ROOTFS_STAMP" ]; then
    flock -u 8
    return 0
  fi
  command -v mmdebstrap >/dev/null || apt_install mmdebstrap
  [ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || apt_install debian-archive-keyring
  local f
  for f in "$RUN_DIR"/rabbitmq4-*.pid "$RUN_DIR"/valkey-*.pid; do
    [ -e "$f" ] && fail "$ROOTFS is outdated but a service started from it may run ($f): stop it first"
  done
  local building=$ROOTFS.building started=$SECONDS
  rm -rf --one-file-system "$building" "$ROOTFS"
  say "building a Debian trixie rootfs with $ROOTFS_PACKAGES in $ROOTFS (once; ~30-60 s, ~200 MB) ..."
  if ! mmdebstrap --mode=root --variant=apt --include="$ROOTFS_PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    trixie "$building" "$MIRROR" >"$CACHE/rootfs-build.log" 2>&1; then
    tail -n 30 "$CACHE/rootfs-build.log" >&2
    rm -rf --one-file-system "$building"
    fail "mmdebstrap failed (log: $CACHE/rootfs-build.log)"
  fi
  # Erlang's distribution resolves "localhost": make sure the rootfs knows it.
  grep -qs '^127\.0\.0\.1[[:space:]].*localhost' "$building/etc/hosts" ||
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >>"$building/etc/hosts"
  echo "$ROOTFS_STAMP" >"$building/.stamp"
  mv "$building" "$ROOTFS"
  flock -u 8
  say "rootfs built in $((SECONDS - started)) s ($(du -sh "$ROOTFS" | cut -f1))"
}

# in_rootfs USER CMD...: run CMD as USER inside the rootfs, now, in the foreground (CLI tools).
in_rootfs() {
  local user=$1
  shift
  chroot --userspec="$user:$user" "$ROOTFS" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}

# spawn_in_rootfs LOG USER CMD...: start CMD as USER in the rootfs, detached, in new PID and
# mount namespaces with their own /proc (mounted only inside, so nothing stays mounted on the
# host). Records the PID of unshare; the namespace's init (CMD) is its only child.
spawn_in_rootfs() {
  local log=$1 user=$2
  shift 2
  # shellcheck disable=SC2016  # expanded by the inner sh
  setsid unshare --pid --mount --fork --kill-child --propagation private \
    sh -c 'mount -t proc proc "$0/proc" && exec chroot "$@"' "$ROOTFS" \
    --userspec="$user:$user" "$ROOTFS" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@" \
    >"$log" 2>&1 </dev/null &
  remember_pid $!
}

# namespace_init PID_OF_UNSHARE: the namespace's PID 1 as the host sees it (CMD of spawn_in_rootfs).
namespace_init() { awk '{print $1}' "/proc/$1/task/$1/children" 2>/dev/null; }

mkdir -p "$RUN_DIR"
