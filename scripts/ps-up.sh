#!/usr/bin/env bash
# Starts blockps PS shards: one tgtd per conf file (its own control number and portal), loaded with tgt-admin.
#
#   scripts/ps-up.sh CONF...          e.g. scripts/ps-up.sh configs/shard0.conf configs/shard1.conf
#   scripts/ps-up.sh --print-tgt-conf CONF
#                                     prints the targets.conf that plain tgt-admin reads (CONF with each
#                                     blockps-shard line made into its three <backing-store> blocks); starts nothing
#
# A conf file is a tgt targets.conf (tgt-admin's format) with top-level lines of ours:
#   blockps-control N          the shard's tgtd control number (tgtd -C N, tgtadm -C N; not a TCP port). The
#                              old name `control-port N` (tgt-admin's) is accepted too
#   blockps-portal IP:PORT     where the shard's tgtd listens (tgt-admin ignores this key)
#   blockps-nop-in SECONDS N   optional: NOP-In every SECONDS, session dropped after N unanswered (tgtadm)
#   blockps-iser yes|no|auto   optional (default no): also serve the shard over iSER (iSCSI over RDMA), as a
#                              second target IQN-iser over the same LUs, listening on the same port number on
#                              every RDMA address (tgtd --iser port=PORT). auto: when the host has an RDMA
#                              device (/sys/class/infiniband), else TCP only (said). iSER logins need both an
#                              initiator-address and an initiator-name ACL in the target.
# and one line of ours inside a <target IQN> block, the shard (at most one per target):
#   blockps-shard PATH 'OPTS'  LUN 1 role=grad, 2 role=weights, 3 role=status over the checkpoint file PATH
#                              (absolute), each LU with the shard's bsopts OPTS (no role=; admins= goes to the
#                              status LU only). Explicit <backing-store> blocks stay valid: beside the line, on
#                              LUN 4 and above and over other files; a shard spelled as three blocks works too.
# For each file it: checks everything first (the file and its blockps-shard lines, the module, free control
# numbers and ports; a wrong line is named as FILE:LINE with what is allowed), creates
# missing checkpoint directories and empty checkpoint files (tgt-admin skips backing stores that do not exist;
# an empty file means "no checkpoint yet"), starts `tgtd -f -C N` (log in the state directory), loads the file
# with `tgt-admin -C N -e`, checks that every LU of the file exists, then opens the portal IP:PORT (not before:
# see placeholder_portal below), and records the shard under $BLOCKPS_STATE_DIR/NAME (NAME = the file's name
# without .conf). It prints one line per shard.
# On any failure it stops every tgtd it started and exits non-zero. Stop shards with scripts/ps-down.sh.
# Environment: see scripts/lib/blockps-tgt.sh (BLOCKPS_STATE_DIR, BLOCKPS_CONTROL_OFFSET, BLOCKPS_PORT_OFFSET,
# BLOCKPS_BACKING_STORE_DIR, BLOCKPS_START_TIMEOUT_S, BLOCKPS_STOP_TIMEOUT_S, BLOCKPS_TGTD_GLIBC_TUNABLES,
# BLOCKPS_PORTAL_ADDR, BLOCKPS_ISER, BLOCKPS_ISER_POOL_MB, BLOCKPS_CLI). The conf file is read with the blockps CLI
# (`blockps conf expand`, `value`, `lus`, `for-tgt-admin`): the build's beside BLOCKPS_BACKING_STORE_DIR, the
# installed one, or PATH's.
set -euo pipefail

blockps_prog=ps-up
# shellcheck source=scripts/lib/blockps-tgt.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/blockps-tgt.sh"

# --print-tgt-conf CONF: the file as tgt-admin reads it; starts nothing.
print_tgt_conf() { # CONF
  local tgt_conf
  if [ ! -f "$1" ] || [ ! -r "$1" ]; then die "$1: no such file (or not readable)"; fi
  tgt_conf=$(conf_expand "$1") || exit
  echo "# $1 as tgt-admin reads it (scripts/ps-up.sh --print-tgt-conf): each blockps-shard line made into its LUs"
  echo "$tgt_conf"
}

# The tools and the environment every shard needs.
check_host() {
  [ "$(id -u)" = 0 ] || die "run as root (tgtd needs it)"
  TGTD=$(find_tool tgtd) || die "tgtd not found: install tgt (scripts/setup.sh)"
  TGTADM=$(find_tool tgtadm) || die "tgtadm not found: install tgt (scripts/setup.sh)"
  TGT_ADMIN=$(find_tool tgt-admin) || die "tgt-admin not found: install tgt (scripts/setup.sh)"
  # Every conf file is read with it; said here once, not by each read.
  blockps_cli >/dev/null || exit
  is_uint "$BLOCKPS_CONTROL_OFFSET" || die "BLOCKPS_CONTROL_OFFSET=$BLOCKPS_CONTROL_OFFSET is not a number"
  check_portal_environment
  case "$BLOCKPS_ISER" in "" | yes | no | auto) ;; *) die "BLOCKPS_ISER=$BLOCKPS_ISER: must be yes, no or auto" ;; esac
  if [ -n "$BLOCKPS_ISER_POOL_MB" ] && { ! is_uint "$BLOCKPS_ISER_POOL_MB" || [ "$BLOCKPS_ISER_POOL_MB" -lt 128 ]; }; then
    die "BLOCKPS_ISER_POOL_MB=$BLOCKPS_ISER_POOL_MB: must be a number of MiB >= 128 (tgt's minimum)"
  fi
}

# --- checking every file before starting anything --------------------------------------------------------------
# One entry per shard, in the order of the arguments.
names=() confs=() controls=() addrs=() ports=() isers=()
needs_module=
# Each file as tgt-admin reads it (conf_expand), until its shard's state directory holds it.
expanded_dir=

# blockps-control N; control-port N (tgt-admin's name, not a TCP port) is the same, still accepted.
# These read one key of a conf file into check_conf's variables of the same name.
conf_control() { # CONF -> control (with BLOCKPS_CONTROL_OFFSET)
  local cps
  mapfile -t cps < <(conf_value "$1" blockps-control; conf_value "$1" control-port)
  [ "${#cps[@]}" -eq 1 ] ||
    die "$1: needs exactly one top-level 'blockps-control N' line, tgtd's control number (the old name" \
      "'control-port N' is accepted too) (found ${#cps[@]})"
  is_uint "${cps[0]}" || die "$1: blockps-control '${cps[0]}' is not a number"
  control=$((cps[0] + BLOCKPS_CONTROL_OFFSET))
  if [ "$control" -lt 1 ] || [ "$control" -gt 32767 ]; then
    die "$1: control number $control out of range 1..32767 (0 is the system tgtd's)"
  fi
}

conf_portal() { # CONF -> addr and port (BLOCKPS_PORTAL_ADDR and BLOCKPS_PORT_OFFSET applied)
  local portal_lines portal
  mapfile -t portal_lines < <(conf_value "$1" blockps-portal)
  [ "${#portal_lines[@]}" -eq 1 ] ||
    die "$1: needs exactly one top-level 'blockps-portal IP:PORT' line (found ${#portal_lines[@]})"
  portal=${portal_lines[0]}
  [[ $portal =~ ^([0-9.]+):([0-9]+)$ ]] || die "$1: blockps-portal '$portal' is not IPv4-ADDRESS:PORT"
  addr=${BLOCKPS_PORTAL_ADDR:-${BASH_REMATCH[1]}}
  port=$((BASH_REMATCH[2] + BLOCKPS_PORT_OFFSET))
  if [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then die "$1: port $port out of range 1..65535"; fi
}

conf_iser() { # CONF NAME PORT -> iser: yes or no (blockps-iser, BLOCKPS_ISER, the host's RDMA devices)
  local iser_lines
  mapfile -t iser_lines < <(conf_value "$1" blockps-iser)
  [ "${#iser_lines[@]}" -le 1 ] || die "$1: more than one 'blockps-iser' line"
  iser=${BLOCKPS_ISER:-${iser_lines[0]:-no}}
  case "$iser" in
    yes) have_rdma_device || die "$1: iSER wanted (blockps-iser yes / BLOCKPS_ISER=yes) but this host has no" \
      "RDMA device (/sys/class/infiniband is empty; Soft-RoCE: rdma link add rxe0 type rxe netdev DEV)" ;;
    no) ;;
    auto)
      if have_rdma_device; then iser=yes; else
        iser=no
        say "$2: no RDMA device on this host: TCP only (blockps-iser auto)"
      fi
      ;;
    *) die "$1: blockps-iser '$iser': must be yes, no or auto" ;;
  esac
  if [ "$iser" = yes ]; then
    iser_port_fix >/dev/null || die "$1: iSER on port $3 needs $(dirname "$BLOCKPS_BACKING_STORE_DIR")/blockps-preload/libblockps-tgtd-iser-port.so" \
      "(built with the module: cmake --build build; installed with cmake --install build --component tgt_module)"
  fi
}

# The LUs of the expanded file: numbered, no ',' in a path, absolute checkpoints; sets needs_module.
check_conf_lus() { # CONF EXPANDED
  local out lus iqn lun bstype path
  # Config::General must be able to read it (tgt-admin -p only prints what it would do). It asks tgtd 0
  # for its targets even so; that noise is dropped.
  if ! out=$("$TGT_ADMIN" -p -e -c "$2" 2>/dev/null); then
    die "$1: tgt-admin cannot read it: $out"
  fi
  lus=$(conf_lus "$2")
  [ -n "$lus" ] || die "$1: no <target> with a blockps-shard line or a backing-store"
  while read -r iqn lun bstype path; do
    [ "$lun" != - ] || die "$1: LU $path of $iqn has no 'lun N' (give every LU its number)"
    case "$path" in *,*) die "$1: backing-store path '$path' contains ',' (tgtd splits on it)" ;; esac
    if [ "$bstype" = blockps ]; then
      needs_module=1
      [ "${path#/}" != "$path" ] || die "$1: checkpoint path '$path' must be absolute"
    fi
  done <<<"$lus"
}

# Nothing else holds the shard's name, control number or port.
check_free() { # CONF NAME CONTROL PORT
  if [ -e "$BLOCKPS_STATE_DIR/$2/pid" ] && tgtd_alive "$(cat "$BLOCKPS_STATE_DIR/$2/pid")"; then
    die "$1: shard $2 is already running (pid $(cat "$BLOCKPS_STATE_DIR/$2/pid")); scripts/ps-down.sh first"
  fi
  if "$TGTADM" -C "$3" --op show --mode sys >/dev/null 2>&1; then
    die "$1: control number $3 is in use by a running tgtd (stop it, or set BLOCKPS_CONTROL_OFFSET)"
  fi
  if [ -n "$(ss -Hltn "sport = :$4" 2>/dev/null)" ]; then
    die "$1: port $4 is in use (ss -ltn shows a listener); tgtd would fall back to 0.0.0.0:3260"
  fi
}

# One file: checked, expanded into $expanded_dir/NAME.conf and added to the shard arrays.
check_conf() { # CONF (as given)
  local conf name seen control addr port iser i
  if [ ! -f "$1" ] || [ ! -r "$1" ]; then die "$1: no such file (or not readable)"; fi
  conf=$(realpath "$1")
  name=$(basename "$conf" .conf)
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || die "$conf: the file name must be made of letters, digits, '.', '_' and '-' (it names the shard)"
  for seen in "${names[@]+"${names[@]}"}"; do
    [ "$seen" != "$name" ] || die "$conf: two files are named $name.conf (the name identifies the shard)"
  done
  if grep -Eq '^[[:space:]]*include[[:space:]]' "$conf"; then
    die "$conf: 'include' is not supported by ps-up (one self-contained file per shard)"
  fi
  conf_control "$conf"
  conf_portal "$conf"
  conf_iser "$conf" "$name" "$port"
  for i in "${!names[@]}"; do
    [ "${controls[$i]}" != "$control" ] || die "$conf and ${confs[$i]} use the same control number $control"
    [ "${ports[$i]}" != "$port" ] || die "$conf and ${confs[$i]} use the same port $port"
  done
  conf_expand "$conf" >"$expanded_dir/$name.conf" || exit
  check_conf_lus "$conf" "$expanded_dir/$name.conf"
  check_free "$conf" "$name" "$control" "$port"
  names+=("$name") confs+=("$conf") controls+=("$control") addrs+=("$addr") ports+=("$port") isers+=("$iser")
}

check_module_installed() {
  if [ -n "$needs_module" ] && [ ! -f "$BLOCKPS_BACKING_STORE_DIR/$BLOCKPS_MODULE_NAME" ]; then
    die "the blockps module is not installed: $BLOCKPS_BACKING_STORE_DIR/$BLOCKPS_MODULE_NAME is missing;" \
      "build and install it: cmake --build build && cmake --install build"
  fi
}

# --- starting the shards ---------------------------------------------------------------------------------------
started=() # indexes of shards whose tgtd runs
# tgtd starts listening here (loopback, a port the kernel picks) and on the shard's portal only once its targets are
# loaded. Until then a worker that logs in again after a restart is refused (ECONNREFUSED, which initiators retry)
# instead of meeting a tgtd that accepts and closes the connection (it does so while it has no target) or answers
# "target not found" (a target whose ACL tgt-admin has not bound yet). A target that closes the connection while
# open-iscsi re-opens a session can leave that session unrecovered for good: open-iscsi #387, fixed in 2.1.9 (Debian
# bookworm has 2.1.8); seen as tests/vm's shard-restart flake.
placeholder_portal=127.0.0.1:0
failed_log=
cleanup_on_failure() {
  local rc=$? i
  rm -rf "$expanded_dir"
  if [ "$rc" -ne 0 ]; then
    if [ -n "$failed_log" ] && [ -s "$failed_log" ]; then
      echo "$blockps_prog: last lines of $failed_log:" >&2
      tail -n 15 "$failed_log" | sed 's/^/    /' >&2
    fi
    for i in "${started[@]+"${started[@]}"}"; do
      say "stopping ${names[$i]} (started by this run) after the failure"
      stop_tgtd "${controls[$i]}" "$(cat "$BLOCKPS_STATE_DIR/${names[$i]}/pid")" "${names[$i]}" ||
        warn "${names[$i]}: tgtd survived SIGKILL"
      [ ! -s "$BLOCKPS_STATE_DIR/${names[$i]}/tgtd.log" ] ||
        mv -f "$BLOCKPS_STATE_DIR/${names[$i]}/tgtd.log" "$BLOCKPS_STATE_DIR/${names[$i]}.last-tgtd.log"
      rm -rf "${BLOCKPS_STATE_DIR:?}/${names[$i]}"
    done
  fi
  exit "$rc"
}

# The shard's state directory: the effective targets.conf (with its iSER copy), conf, control, portal; and the
# checkpoint files its LUs need (tgt-admin silently skips a backing store that does not exist).
prepare_state() { # I
  local name=${names[$1]} port=${ports[$1]} state=$BLOCKPS_STATE_DIR/${names[$1]} bstype path
  rm -rf "$state"
  mkdir -p "$state"
  while read -r _ _ bstype path; do
    [ "$bstype" = blockps ] || continue
    mkdir -p "$(dirname "$path")" || die "$name: cannot create the checkpoint directory of $path"
    [ -e "$path" ] || : >"$path" || die "$name: cannot create the checkpoint file $path"
  done < <(conf_lus "$expanded_dir/$name.conf")

  if [ "${isers[$1]}" = yes ]; then
    conf_for_tgt_admin "$expanded_dir/$name.conf" --iser >"$state/targets.conf"
    echo "$port" >"$state/iser-port"
  else
    conf_for_tgt_admin "$expanded_dir/$name.conf" >"$state/targets.conf"
  fi
  echo "${confs[$1]}" >"$state/conf"
  echo "${controls[$1]}" >"$state/control"
  echo "${addrs[$1]}:$port" >"$state/portal"
}

# tgtd in the foreground of its own session, on the placeholder portal; sets pid and iser_args.
start_tgtd() { # I LOG
  local control=${controls[$1]} port=${ports[$1]} tunables=() module_mount=() waited=0
  [ -z "$BLOCKPS_TGTD_GLIBC_TUNABLES" ] || tunables=("GLIBC_TUNABLES=$BLOCKPS_TGTD_GLIBC_TUNABLES")
  iser_args=()
  if [ "${isers[$1]}" = yes ]; then
    tunables+=("LD_PRELOAD=$(iser_port_fix)")
    iser_args=(--iser "port=$port${BLOCKPS_ISER_POOL_MB:+,pool_sz_mb=$BLOCKPS_ISER_POOL_MB}")
  fi
  echo "=== $(date '+%F %T') ps-up: ${tunables[*]+${tunables[*]} }$TGTD -f -C $control --iscsi portal=$placeholder_portal${iser_args[*]+ ${iser_args[*]}}" >>"$2"
  # setsid: the shard must not die with this shell's session. -f keeps tgtd in the foreground so that its
  # log goes to our file (daemonised, tgtd logs to syslog, which these machines may not have).
  if [ "$BLOCKPS_BACKING_STORE_DIR" != "$TGTD_MODULE_DIR" ]; then
    # The mount point: Debian's tgt does not ship tgtd's module directory (a fresh machine or VM lacks it).
    mkdir -p "$TGTD_MODULE_DIR" || die "cannot create $TGTD_MODULE_DIR (the mount point of $BLOCKPS_BACKING_STORE_DIR)"
    # shellcheck disable=SC2016 # $0 and $@ belong to the inner shell
    module_mount=(unshare --mount --propagation private -- sh -c 'mount --bind "$0" '"$TGTD_MODULE_DIR"' && exec "$@"'
      "$BLOCKPS_BACKING_STORE_DIR")
  fi
  env "${tunables[@]+"${tunables[@]}"}" setsid "${module_mount[@]+"${module_mount[@]}"}" "$TGTD" -f -C "$control" \
    --iscsi "portal=$placeholder_portal" "${iser_args[@]+"${iser_args[@]}"}" </dev/null >>"$2" 2>&1 &
  pid=$!
  echo "$pid" >"$BLOCKPS_STATE_DIR/${names[$1]}/pid"
  started+=("$1")
  # Until setsid has exec'd tgtd the process is not called tgtd yet (and stop_tgtd would not touch it).
  while pid_running "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != tgtd ] && [ "$waited" -lt 50 ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
}

# Until tgtd answers tgtadm; then its placeholder portal (sets placeholder), iSER driver and module are checked.
wait_for_tgtd() { # I LOG
  local name=${names[$1]} control=${controls[$1]} port=${ports[$1]} log=$2 waited=0 why
  until "$TGTADM" -C "$control" --op show --mode sys >/dev/null 2>&1; do
    if ! tgtd_alive "$pid"; then
      if grep -q "another tgtd is using" "$log"; then
        die "$name: control number $control is used by another tgtd"
      fi
      die "$name: tgtd exited during start-up (log: $log)"
    fi
    [ "$waited" -lt $((BLOCKPS_START_TIMEOUT_S * 10)) ] ||
      die "$name: tgtd did not answer tgtadm -C $control within ${BLOCKPS_START_TIMEOUT_S}s (log: $log)"
    sleep 0.1
    waited=$((waited + 1))
  done
  if grep -q "another tgtd is using" "$log"; then
    die "$name: control number $control is used by another tgtd"
  fi
  # The placeholder as tgtd lists it (tgt shows and matches the port the kernel picked), for closing it later.
  placeholder=$("$TGTADM" -C "$control" --op show --mode portal | sed -n 's/^Portal: \(127\.0\.0\.1:[0-9]*\),.*/\1/p')
  [ "$(wc -w <<<"$placeholder")" = 1 ] ||
    die "$name: tgtd lists no single placeholder portal 127.0.0.1:*: $(tr '\n' ' ' <<<"$placeholder") (log: $log)"
  # tgtd carries on without iSER when its RDMA set-up fails (no device, port taken); the iSER targets would
  # then fail to load with a bare "invalid request".
  if [ "${isers[$1]}" = yes ] && ! "$TGTADM" -C "$control" --op show --mode sys | grep -Eq '^[[:space:]]+iser: ready'; then
    die "$name: tgtd's iSER driver is not ready (RDMA device? iSER port $port taken by another tgtd?): $(grep -i 'iser\|rdma' "$log" | tail -n 3 | tr '\n' ' ')"
  fi
  if [ -n "$needs_module" ] && ! "$TGTADM" -C "$control" --op show --mode sys | grep -Eq '^[[:space:]]+blockps([[:space:]]|$)'; then
    why=$(grep -o 'blockps: NOT LOADED:.*' "$log" | tail -n 1 || true)
    die "$name: tgtd did not load $BLOCKPS_BACKING_STORE_DIR/$BLOCKPS_MODULE_NAME:" \
      "${why:-see the log (undefined symbol?)} (log: $log)"
  fi
}

# tgt-admin loads the targets.conf; then every LU of it must be there (sets show and luns_of).
load_targets() { # I LOG
  local name=${names[$1]} control=${controls[$1]} state=$BLOCKPS_STATE_DIR/${names[$1]} log=$2 reason found
  local iqn lun path
  echo "=== $(date '+%F %T') ps-up: $TGT_ADMIN -C $control -e -c $state/targets.conf" >>"$log"
  if ! "$TGT_ADMIN" -C "$control" -e -c "$state/targets.conf" >>"$log" 2>&1; then
    # tgtadm can only say "invalid request"; the module logs the reason.
    reason=$(grep -o 'blockps: refused.*' "$log" | tail -n 1 || true)
    die "$name: tgt-admin could not load ${confs[$1]}${reason:+: $reason} (log: $log)"
  fi
  # tgt-admin can succeed while skipping LUs (a missing backing store, one "in use"): check each one.
  show=$("$TGTADM" -C "$control" --op show --mode target)
  luns_of=()
  while read -r iqn lun _ path; do
    found=$(awk -v iqn="$iqn" -v lun="$lun" '
      /^Target [0-9]+: / { t = $3 }
      t == iqn && $1 == "LUN:" && $2 == lun { ok = 1 }
      END { print ok ? "yes" : "no" }' <<<"$show")
    [ "$found" = yes ] || die "$name: LUN $lun ($path) of $iqn did not come up (log: $log)"
    luns_of+=("$iqn/$lun")
  done < <(conf_lus "$state/targets.conf")
}

# NOP-In (tgt-admin has no key for it): tgtd pings idle initiators and ends sessions that stop answering,
# so a dead worker of a sync shard is seen in seconds, not after TCP keepalive's 30 minutes.
set_nop_in() { # I LOG
  local conf=${confs[$1]} nop_lines nop_interval nop_count tid param pname pvalue
  mapfile -t nop_lines < <(conf_value "$conf" blockps-nop-in)
  [ "${#nop_lines[@]}" -gt 0 ] || return 0
  read -r nop_interval nop_count _ <<<"${nop_lines[0]}"
  [[ "${nop_interval:-}" =~ ^[1-9][0-9]*$ && "${nop_count:-}" =~ ^[1-9][0-9]*$ ]] ||
    die "$conf: blockps-nop-in '${nop_lines[0]}': expected INTERVAL_S COUNT, both whole numbers > 0"
  while read -r tid; do
    for param in "nop_interval $nop_interval" "nop_count $nop_count"; do
      read -r pname pvalue <<<"$param"
      "$TGTADM" -C "${controls[$1]}" --op update --mode target --tid "$tid" -n "$pname" -v "$pvalue" >>"$2" 2>&1 ||
        die "${names[$1]}: tgtadm could not set $pname=$pvalue on target $tid (log: $2)"
    done
  done < <(awk '/^Target [0-9]+: / { sub(":", "", $2); print $2 }' <<<"$show")
}

# Loaded: now the shard's portal instead of the placeholder (see placeholder_portal).
open_portal() { # I LOG
  local name=${names[$1]} control=${controls[$1]} portal=${addrs[$1]}:${ports[$1]} log=$2 portals
  "$TGTADM" -C "$control" --lld iscsi --op new --mode portal --param "portal=$portal" >>"$log" 2>&1 ||
    die "$name: tgtd could not listen on $portal (port in use? not an address of this host?) (log: $log)"
  "$TGTADM" -C "$control" --lld iscsi --op delete --mode portal --param "portal=$placeholder" >>"$log" 2>&1 ||
    die "$name: tgtd would not close its placeholder portal $placeholder (log: $log)"
  portals=$("$TGTADM" -C "$control" --op show --mode portal)
  if [ "$(grep -c '^Portal: ' <<<"$portals")" != 1 ] || ! grep -q "^Portal: $portal," <<<"$portals"; then
    die "$name: tgtd's portals are not $portal alone: $(tr '\n' ' ' <<<"$portals")"
  fi
}

start_shard() { # I
  local log=$BLOCKPS_STATE_DIR/${names[$1]}/tgtd.log
  prepare_state "$1"
  failed_log=$log
  start_tgtd "$1" "$log"
  wait_for_tgtd "$1" "$log"
  load_targets "$1" "$log"
  set_nop_in "$1" "$log"
  open_portal "$1" "$log"
  failed_log=
  say "${names[$1]}: tgtd pid $pid, control ${controls[$1]}, portal ${addrs[$1]}:${ports[$1]}${iser_args[*]+ (TCP and iSER)}," \
    "LUs ${luns_of[*]} (state $BLOCKPS_STATE_DIR/${names[$1]})"
}

main() {
  local conf i
  case "${1:-}" in
    -h | --help) usage 0 ;;
    "") echo "usage: scripts/ps-up.sh CONF... (--help for details)" >&2; exit 2 ;;
    --print-tgt-conf)
      [ "$#" -eq 2 ] || die "--print-tgt-conf takes one conf file (got $(($# - 1)) arguments)"
      print_tgt_conf "$2"
      exit 0
      ;;
  esac
  check_host
  expanded_dir=$(mktemp -d "${TMPDIR:-/tmp}/blockps-ps-up-XXXXXX")
  trap 'rm -rf "$expanded_dir"' EXIT
  for conf in "$@"; do check_conf "$conf"; done
  check_module_installed

  trap cleanup_on_failure EXIT
  mkdir -p "$BLOCKPS_STATE_DIR"
  for i in "${!names[@]}"; do start_shard "$i"; done
  trap - EXIT
  rm -rf "$expanded_dir"
}

main "$@"
