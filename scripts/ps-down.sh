#!/usr/bin/env bash
# Stops blockps PS shards started by scripts/ps-up.sh.
#
#   scripts/ps-down.sh                 every shard recorded under $BLOCKPS_STATE_DIR (default /run/blockps)
#   scripts/ps-down.sh CONF...         the shards of these conf files (named after the file, without .conf)
#
# For each shard: sets its targets offline (new commands get BUSY) and deletes them with --force, retrying while
# commands drain (sessions are dropped; a blockps shard writes its final checkpoint when its last LU closes),
# shuts tgtd down (`tgtadm --op delete --mode system`), waits up to
# BLOCKPS_STOP_TIMEOUT_S (default 10) and then sends SIGKILL, and removes the shard's state. Safe to run again:
# a shard that is not running is reported and skipped. The last tgtd log is kept as
# $BLOCKPS_STATE_DIR/NAME.last-tgtd.log. Exits non-zero if a target could not be deleted in time (its final
# checkpoint was not written; said loudly) or a tgtd survived SIGKILL.
set -euo pipefail

blockps_prog=ps-down
# shellcheck source=scripts/lib/blockps-tgt.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/blockps-tgt.sh"

case "${1:-}" in
  -h | --help)
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
esac

[ "$(id -u)" = 0 ] || die "run as root (tgtd runs as root)"
TGTADM=$(find_tool tgtadm) || die "tgtadm not found: install tgt (scripts/setup.sh)"

names=()
if [ "$#" -eq 0 ]; then
  if [ -d "$BLOCKPS_STATE_DIR" ]; then
    for dir in "$BLOCKPS_STATE_DIR"/*/; do
      [ -d "$dir" ] || continue
      [ -e "$dir/control" ] || [ -e "$dir/pid" ] || continue
      names+=("$(basename "$dir")")
    done
  fi
else
  for conf in "$@"; do
    names+=("$(basename "$conf" .conf)")
  done
fi

if [ "${#names[@]}" -eq 0 ]; then
  say "no shard recorded under $BLOCKPS_STATE_DIR: nothing to stop"
  exit 0
fi

rc=0
for name in "${names[@]}"; do
  state=$BLOCKPS_STATE_DIR/$name
  if [ ! -d "$state" ]; then
    say "$name: not running (no state in $state)"
    continue
  fi
  pid=$(cat "$state/pid" 2>/dev/null || true)
  control=$(cat "$state/control" 2>/dev/null || true)
  if ! is_uint "$control"; then
    warn "$name: $state/control is missing or bad; only the pid can be used"
    control=
  fi
  if [ -n "$pid" ] && tgtd_alive "$pid"; then
    if [ -n "$control" ]; then
      stopped=0
      stop_tgtd "$control" "$pid" "$name" || stopped=$?
      case $stopped in
        0) say "$name: stopped tgtd pid $pid (control $control)" ;;
        2) warn "$name: stopped tgtd pid $pid, but without every final checkpoint (see above)"; rc=1 ;;
        *) warn "$name: tgtd pid $pid survived SIGKILL"; rc=1; continue ;;
      esac
    else
      kill -9 "$pid" 2>/dev/null || true
      say "$name: killed tgtd pid $pid"
    fi
  else
    say "$name: tgtd ${pid:+pid $pid }was not running; clearing its state"
    [ -z "$control" ] || rm -f "/var/run/tgtd/socket.$control" "/var/run/tgtd/socket.$control.lock"
  fi
  # Keep the last log next to the state directory: the reason a shard misbehaved is in it.
  [ ! -s "$state/tgtd.log" ] || mv -f "$state/tgtd.log" "$BLOCKPS_STATE_DIR/$name.last-tgtd.log"
  rm -rf "${state:?}"
done
exit "$rc"
