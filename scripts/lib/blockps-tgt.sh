# shellcheck shell=bash
# Shared helpers of scripts/ps-up.sh and scripts/ps-down.sh: reading a blockps targets.conf, and starting and
# stopping one tgtd per shard. Source it; it defines functions and variables only.
#
# Environment (all optional):
#   BLOCKPS_STATE_DIR          where running shards are recorded (default /run/blockps): one directory per
#                              shard, named after its conf file, holding pid, control, portal, conf, the
#                              effective targets.conf given to tgt-admin, and tgtd.log
#   BLOCKPS_CONTROL_OFFSET     added to each file's blockps-control (default 0): run the example configs on a
#                              private range of control numbers
#   BLOCKPS_PORT_OFFSET        added to each file's blockps-portal port (default 0)
#   BLOCKPS_BACKING_STORE_DIR  where tgtd loads modules (default /usr/lib/tgt/backing-store, compiled into
#                              tgtd; another directory, e.g. a build's tgt-modules/, is bind-mounted over it
#                              in the shard's own mount namespace)
#   BLOCKPS_START_TIMEOUT_S    wait for a tgtd to answer tgtadm (default 15)
#   BLOCKPS_STOP_TIMEOUT_S     wait for a tgtd to exit before SIGKILL (default 10)
#   BLOCKPS_TGTD_GLIBC_TUNABLES  GLIBC_TUNABLES for the shards' tgtd (default below; empty: glibc's defaults).
#                              tgtd allocates one buffer per command; with glibc's defaults every 1 MiB buffer
#                              is fresh memory and tgtd spends its time in page faults (1 MiB QD16 writes ~1.8
#                              GB/s, with these ~3.2 GB/s on the 2-core machines; bench/pushpull measures it).
#                              Same value as kTgtdGlibcTunables in tests/support/tgtd_instance.h.
#   BLOCKPS_PORTAL_ADDR        replaces the address of every file's blockps-portal (default: the file's). iSER
#                              needs an address of an RDMA device (not 127.0.0.1): the same configs serve a VM
#                              or a host with RoCE this way (tests/vm does). scripts/attach.sh honours it too.
#   BLOCKPS_ISER               yes, no or auto: overrides every file's blockps-iser line (see below)
#   BLOCKPS_ISER_POOL_MB       tgtd's iSER buffer pool in MiB (tgtd --iser pool_sz_mb=N, at least 128; default
#                              tgt's 1024). Each tgtd with iSER registers that much memory.
#   BLOCKPS_CLI                the blockps CLI that reads shard configs and status pages (default: found as
#                              blockps_cli below says: the build's, the installed one, PATH's)

BLOCKPS_STATE_DIR=${BLOCKPS_STATE_DIR:-/run/blockps}
BLOCKPS_CONTROL_OFFSET=${BLOCKPS_CONTROL_OFFSET:-0}
BLOCKPS_PORT_OFFSET=${BLOCKPS_PORT_OFFSET:-0}
TGTD_MODULE_DIR=/usr/lib/tgt/backing-store
BLOCKPS_BACKING_STORE_DIR=${BLOCKPS_BACKING_STORE_DIR:-$TGTD_MODULE_DIR}
BLOCKPS_START_TIMEOUT_S=${BLOCKPS_START_TIMEOUT_S:-15}
BLOCKPS_STOP_TIMEOUT_S=${BLOCKPS_STOP_TIMEOUT_S:-10}
BLOCKPS_PORTAL_ADDR=${BLOCKPS_PORTAL_ADDR:-}
BLOCKPS_ISER=${BLOCKPS_ISER:-}
BLOCKPS_ISER_POOL_MB=${BLOCKPS_ISER_POOL_MB:-}
BLOCKPS_TGTD_GLIBC_TUNABLES=${BLOCKPS_TGTD_GLIBC_TUNABLES-glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456}
# shellcheck disable=SC2034 # used by the scripts that source this file
BLOCKPS_MODULE_NAME=bs_blockps.so

# shellcheck source=scripts/lib/messages.sh
. "$(dirname "${BASH_SOURCE[0]}")/messages.sh"
# Written by cmake --install next to this file (BLOCKPS_INSTALLED_CLI); a source tree has none.
if [ -f "$(dirname "${BASH_SOURCE[0]}")/installed-paths.sh" ]; then
  # shellcheck source=/dev/null
  . "$(dirname "${BASH_SOURCE[0]}")/installed-paths.sh"
fi

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

# The environment that places a conf file's portal (ps-up.sh and attach.sh): dies on a bad value.
check_portal_environment() {
  is_uint "$BLOCKPS_PORT_OFFSET" || die "BLOCKPS_PORT_OFFSET=$BLOCKPS_PORT_OFFSET is not a number"
  if [ -n "$BLOCKPS_PORTAL_ADDR" ] && ! [[ $BLOCKPS_PORTAL_ADDR =~ ^[0-9]+(\.[0-9]+){3}$ ]]; then
    die "BLOCKPS_PORTAL_ADDR=$BLOCKPS_PORTAL_ADDR is not an IPv4 address"
  fi
}

# tgt lives in /usr/sbin, which a non-root PATH may lack.
find_tool() {
  local name=$1 dir
  if command -v "$name" >/dev/null 2>&1; then
    command -v "$name"
    return 0
  fi
  for dir in /usr/sbin /sbin /usr/local/sbin; do
    if [ -x "$dir/$name" ]; then
      echo "$dir/$name"
      return 0
    fi
  done
  return 1
}

# True when PID is a live process (a zombie does not count).
pid_running() {
  local stat
  is_uint "$1" || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# True when PID is a live (not zombie) process whose command is tgtd.
tgtd_alive() { pid_running "$1" && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = tgtd ]; }

# --- reading a conf file -------------------------------------------------------------------------------------
# tgt-admin reads these files with Perl's Config::General; we read the few things we need with the blockps CLI's
# `blockps conf` subcommands (client/cli/targets_conf.h says how they read; docs/OPTIONS.md, "blockps CLI"):
#   blockps-control N         (top level; required)  tgtd -C N: tgtd's control number, not a TCP port (the old
#                             name control-port N, tgt-admin's own, is accepted too; tgt-admin ignores ours)
#   blockps-portal IP:PORT    (top level; required)  tgtd --iscsi portal=IP:PORT. tgt-admin ignores unknown
#                                                    top-level keys, so this one is ours.
#   blockps-iser yes|no|auto  (top level; default no) also serve the shard over iSER (below)
#   <target IQN> ... </target> with a blockps-shard line (below), <backing-store PATH> blocks (lun N, bs-type T)
#                                                    or backing-store PATH lines

# blockps_conf PREFIX SUBCOMMAND ARGS...: what `blockps conf SUBCOMMAND ARGS...` prints on stdout. A refusal dies
# with PREFIX and the CLI's "FILE:LINE: what is wrong (what is allowed)"; nothing is printed then.
blockps_conf() {
  local prefix=$1 cli err
  shift
  cli=$(blockps_cli) || exit
  { err=$("$cli" conf "$@" 2>&1 >&3); } 3>&1 && return 0
  die "$prefix${err#blockps: ERROR: }"
}

conf_value() { # FILE KEY -> the value of a top-level KEY (outside any <block>), one line per occurrence
  blockps_conf "" value "$1" "$2"
}

# FILE -> one line per LU: "IQN LUN BSTYPE PATH" (LUN "-" when the file leaves it to tgt-admin, BSTYPE "-"
# when none is set: tgt's default rdwr). A target-level bs-type applies to LUs that do not set their own.
conf_lus() {
  blockps_conf "" lus "$1"
}

# --- the blockps-shard line -----------------------------------------------------------------------------------
# A shard's three LUs come from one line of ours inside its <target IQN> block:
#   blockps-shard /ABSOLUTE/PATH/model.ckpt 'k=v;k=v'
# tgt-admin never sees the line: `blockps conf expand` (client/cli/targets_conf.h says how) makes it into three
# <backing-store> blocks, LUN 1 role=grad, 2 role=weights, 3 role=status over the one checkpoint file.

# conf_expand FILE [PREFIX]: FILE as tgt-admin reads it on stdout (`blockps conf expand`). A wrong line dies with
# PREFIX and the CLI's "FILE:LINE: what is wrong (what is allowed)"; nothing is printed then.
conf_expand() {
  blockps_conf "${2:-}" expand "$1"
}

# The `blockps` CLI the scripts call (conf, status --field), on stdout: the first that exists of
#   $BLOCKPS_CLI                                 (dies when it names no program)
#   BUILD/client/cli/blockps for BLOCKPS_BACKING_STORE_DIR=BUILD/tgt-modules (the build's module, as the tests,
#                                                tests/vm, tests/soak and bench/cluster run the scripts)
#   BINDIR/blockps of the install these scripts came with (lib/installed-paths.sh, written by cmake --install)
#   build/client/cli/blockps of the source tree these scripts are in (before PATH: an older installed blockps
#                                                may lack the subcommands these scripts call)
#   blockps on PATH
# Dies naming where it looked when none is there.
blockps_cli() {
  local here c
  if [ -n "${BLOCKPS_CLI:-}" ]; then
    [ -x "$BLOCKPS_CLI" ] || die "BLOCKPS_CLI=$BLOCKPS_CLI is not an executable (the blockps CLI)"
    echo "$BLOCKPS_CLI"
    return 0
  fi
  here=$(dirname "${BASH_SOURCE[0]}")
  for c in "$(dirname "$BLOCKPS_BACKING_STORE_DIR")/client/cli/blockps" "${BLOCKPS_INSTALLED_CLI:-}" \
    "$here/../../build/client/cli/blockps" "$(command -v blockps 2>/dev/null || true)"; do
    if [ -n "$c" ] && [ -f "$c" ] && [ -x "$c" ]; then
      echo "$c"
      return 0
    fi
  done
  die "the blockps CLI is not found (the scripts read shard configs and status pages with it): not beside" \
    "BLOCKPS_BACKING_STORE_DIR's build, not installed${BLOCKPS_INSTALLED_CLI:+ at $BLOCKPS_INSTALLED_CLI}, not in" \
    "$(realpath -m "$here/../../build")/client/cli, not on PATH; build it (cmake --build build --target" \
    "blockps-cli), install it (cmake --install build --component client) or set BLOCKPS_CLI"
}

# conf_for_tgt_admin FILE [--iser]: FILE as tgt-admin -C N reads it (`blockps conf for-tgt-admin`): without its
# top-level control-port line. tgt-admin refuses `-C N` together with a control-port line ("Multiple control-port
# definitions are not allowed!"), and with only the line it asks tgtd 0 (not N) which targets and tids exist before
# reading it; so we pass -C N and drop the line. With --iser, each target gets its iSER copy (below).
conf_for_tgt_admin() {
  blockps_conf "" for-tgt-admin "$@"
}

# --- iSER ------------------------------------------------------------------------------------------------------
# tgt (1.0.85) serves a target over TCP or over iSER, never both (a target created with --lld iser refuses TCP
# logins and the other way round), so a shard with iSER gets a second target, IQN-iser, over the same three
# checkpoint paths (the module resolves them to the same in-memory shard): `driver iser`, the same ACLs and LUs.
# Its iSER listener takes the port of the shard's blockps-portal on every RDMA address of the host (tgtd has
# no iSER address option; RDMA CM ports are not TCP ports, so the two portals do not collide).
# `blockps conf for-tgt-admin --iser` adds the copies (kIserTargetSuffix in client/cli/targets_conf.h is this
# suffix): `driver iser` and no InitialR2T and ImmediateData lines (tgt's iSER supports neither: its target_create
# forces InitialR2T=Yes, ImmediateData=No, and tgt-admin would undo that). attach.sh finds them by the suffix.
# shellcheck disable=SC2034 # used by attach.sh
BLOCKPS_ISER_SUFFIX=-iser

# True when the host has an RDMA device (a RoCE NIC, Soft-RoCE rxe, ...): iSER can work.
have_rdma_device() {
  local d
  for d in /sys/class/infiniband/*; do
    [ -e "$d" ] && return 0
  done
  return 1
}

# The LD_PRELOAD fix for `tgtd --iser port=N` (ps_backend/tgt_glue/tgtd_iser_port_errno_preload.c): tgt 1.0.85 checks errno after
# strtol without clearing it first, and errno is already ENOENT when main() starts (the dynamic loader's and
# libnl's failed opens), so every port= is "invalid port supplied". Without port= every tgtd listens for iSER
# on 3260 and only the first of several shards on a host gets it. Prints the path, or fails.
# Looked up next to the module directory: BUILD/blockps-preload for BUILD/tgt-modules, and
# /usr/lib/tgt/blockps-preload for the installed /usr/lib/tgt/backing-store.
iser_port_fix() {
  local f
  f=$(dirname "$BLOCKPS_BACKING_STORE_DIR")/blockps-preload/libblockps-tgtd-iser-port.so
  [ -f "$f" ] || return 1
  echo "$f"
}

# --- tgtd processes ------------------------------------------------------------------------------------------

# Lines "Target N: IQN" of `tgtadm --op show --mode target` -> the tids.
tgtd_tids() { # CONTROL
  "$TGTADM" -C "$1" --op show --mode target 2>/dev/null | sed -n 's/^Target \([0-9]*\): .*/\1/p'
}

# Stops the tgtd PID serving control number CONTROL, so that every blockps shard writes its final checkpoint
# (a shard writes it when its last LU closes, i.e. when its target is deleted): targets are set offline (new
# commands get BUSY, so a busy LU drains), deleted with --force (live sessions are dropped), retried until
# BLOCKPS_STOP_TIMEOUT_S passes; then `--op delete --mode system`, a bounded wait, and SIGKILL (tgtd ignores
# SIGTERM). Returns 0 when the process is gone with every target deleted, 2 when it is gone but a target could
# not be deleted (its shard's updates since its last checkpoint are lost: said loudly), 1 when it survived
# SIGKILL (should not happen).
stop_tgtd() { # CONTROL PID [NAME]
  local control=$1 pid=$2 name=${3:-tgtd} tid waited=0 limit left rc=0
  if ! tgtd_alive "$pid"; then
    return 0
  fi
  for tid in $(tgtd_tids "$control"); do
    "$TGTADM" -C "$control" --op update --mode target --tid "$tid" -n state -v offline >/dev/null 2>&1 || true
  done
  limit=$((BLOCKPS_STOP_TIMEOUT_S * 10))
  while :; do
    left=
    for tid in $(tgtd_tids "$control"); do
      "$TGTADM" -C "$control" --op delete --mode target --tid "$tid" --force >/dev/null 2>&1 || left="$left $tid"
    done
    if [ -z "$left" ] || [ "$waited" -ge "$limit" ]; then break; fi
    sleep 0.1
    waited=$((waited + 1))
  done
  if [ -n "$left" ]; then
    warn "$name: target(s)$left on control $control still had commands in flight after ${BLOCKPS_STOP_TIMEOUT_S}s;" \
      "their shards' final checkpoints were NOT written (updates since the last checkpoint are lost)"
    rc=2
  fi
  "$TGTADM" -C "$control" --op delete --mode system >/dev/null 2>&1 ||
    warn "$name: tgtd (control $control) refused to shut down; killing it"
  waited=0
  limit=$((BLOCKPS_STOP_TIMEOUT_S * 10))
  while tgtd_alive "$pid" && [ "$waited" -lt "$limit" ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if tgtd_alive "$pid"; then
    warn "$name: tgtd pid $pid still runs ${BLOCKPS_STOP_TIMEOUT_S}s after shutdown; sending SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
    waited=0
    while tgtd_alive "$pid" && [ "$waited" -lt 50 ]; do
      sleep 0.1
      waited=$((waited + 1))
    done
  fi
  if tgtd_alive "$pid"; then
    return 1
  fi
  # tgtd leaves its control socket and lock file behind.
  rm -f "/var/run/tgtd/socket.$control" "/var/run/tgtd/socket.$control.lock"
  return "$rc"
}
