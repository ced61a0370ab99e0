#!/usr/bin/env bash
# The shard's systemd unit (blockps-shard@.service: the build's copy, which runs this tree's scripts) under a
# real systemd running as init: PID 1 of its own PID and mount namespace, as in a container, with only our units
# (SYSTEMD_UNIT_PATH) and nothing of the host's boot. A copy of configs/shard0.conf is the instance's config.
# Checked: the unit starts the shard; after a push and a checkpoint (SYNCHRONIZE CACHE) and one more push,
# `kill -9` of its tgtd makes systemd start it again, and the shard comes back with the checkpoint's weights
# (the push after it is lost, as the unit's docs say); `systemctl stop` writes the final checkpoint and leaves
# no tgtd.
#   test_systemd_shard.sh --repo REPO --lu-io PATH-TO-blockps_lu_io --units BUILD/systemd-test
# Exit 0: pass; 77: skipped (not root, tgt or systemd missing); anything else: fail.
set -euo pipefail

# shellcheck source=tests/integration/shell_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_lib.sh"
units=''
args=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --units) units=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
parse_test_args "${args[@]}"
require_root_and_tgt
[ -x /lib/systemd/systemd ] || skip "systemd is not installed (/lib/systemd/systemd)"
for tool in unshare nsenter systemctl; do command -v "$tool" >/dev/null || skip "$tool is not installed"; done
[ -f "$units/blockps-shard@.service" ] || fail "--units $units holds no blockps-shard@.service"
[ -x "$lu_io" ] || fail "--lu-io $lu_io is not an executable"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/blockps-systemd-XXXXXX")
name=blockps-systemd-test  # the instance: its config is $tmp/$name.conf, its state /run/blockps/$name
# Control 31801, port 42261: clear of TgtdInstance (2000-29999 / 20000-32767) and the other script tests.
control_offset=31800 port_offset=39000
init=''
unshare_pid=''
cleanup() {
  local rc=$?
  if [ -n "$init" ]; then
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
      nsenter -t "$init" -m -p -- systemctl status "blockps-shard@$name" --no-pager -l >&2 2>&1 || true
      echo "---- systemd's console" >&2
      tail -n 40 "$tmp/systemd.log" >&2 || true
      nsenter -t "$init" -m -- sh -c "tail -n 30 /run/blockps/$name/tgtd.log /run/blockps/$name.last-tgtd.log" >&2 2>/dev/null || true
    fi
    kill -9 "$init" 2>/dev/null || true  # the namespace's init: every process in it dies with it
  fi
  [ -z "$unshare_pid" ] || wait "$unshare_pid" 2>/dev/null || true
  finish_test "$rc" "$tmp"
}
trap cleanup EXIT

confs=()
example_confs_into "$tmp" shard0
mv "$tmp/shard0.conf" "$tmp/$name.conf"
mkdir -p "$tmp/units/blockps-shard@.service.d"
cp "$units/blockps-shard@.service" "$tmp/units/"
# The test's settings: its config directory, this build's module, private ports; and no dependency on a
# booted system (sysinit.target and the like are not there).
cat >"$tmp/units/blockps-shard@.service.d/test.conf" <<CONF
[Unit]
DefaultDependencies=no
[Service]
Environment=BLOCKPS_CONF_DIR=$tmp
Environment=BLOCKPS_BACKING_STORE_DIR=${BLOCKPS_BACKING_STORE_DIR:-/usr/lib/tgt/backing-store}
Environment=BLOCKPS_CONTROL_OFFSET=$control_offset BLOCKPS_PORT_OFFSET=$port_offset
CONF
# A sanitized build's module needs the ASan runtime loaded first in tgtd (tests/build_configurations.sh): the
# shard's processes get it; this script's own tools do not (pgrep deadlocks with it preloaded).
for var in LD_PRELOAD ASAN_OPTIONS UBSAN_OPTIONS; do
  [ -z "${!var:-}" ] || echo "Environment=$var=${!var}" >>"$tmp/units/blockps-shard@.service.d/test.conf"
done
unset LD_PRELOAD
cat >"$tmp/units/blockps-test.target" <<CONF
[Unit]
Description=blockps systemd test
DefaultDependencies=no
Wants=blockps-shard@$name.service
CONF

step "systemd as init of its own namespace, starting blockps-shard@$name"
unshare --pid --fork --mount --mount-proc --kill-child env -i PATH="$PATH" container=blockps-test \
  SYSTEMD_UNIT_PATH="$tmp/units" /lib/systemd/systemd --system --unit=blockps-test.target \
  --log-target=console --show-status=false >"$tmp/systemd.log" 2>&1 &
unshare_pid=$!
deadline=$((SECONDS + 20))
until init=$(pgrep -P "$unshare_pid" -x systemd); do
  [ "$SECONDS" -lt "$deadline" ] || fail "systemd did not start in its namespace: $(tail -n 20 "$tmp/systemd.log")"
  sleep 0.2
done
sctl() { nsenter -t "$init" -m -p -- systemctl "$@"; }
in_ns() { nsenter -t "$init" -m -p -- "$@"; }
wait_active() { # WHAT
  local deadline=$((SECONDS + 60))
  until [ "$(sctl is-active "blockps-shard@$name" 2>/dev/null)" = active ] &&
    "$lu_io" "$(url 3)" info >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$1: blockps-shard@$name is $(sctl is-active "blockps-shard@$name" 2>&1) after 60 s"
    sleep 0.5
  done
}
url() { echo "iscsi://127.0.0.1:$((3261 + port_offset))/iqn.2026-11.io.blockps:shard0/$1"; }
export BLOCKPS_INITIATOR_IQN=iqn.2026-11.io.blockps:systemd-test
wait_active "start"
ckpt=$tmp/lib/shard0/model.ckpt

step "a push, a checkpoint, one more push; then kill -9 of the shard's tgtd"
"$lu_io" "$(url 1)" write 0 1M 7 || fail "push"
"$lu_io" "$(url 1)" sync || fail "SYNCHRONIZE CACHE"
"$lu_io" "$(url 2)" read 0 1M >"$tmp/checkpointed.bin" || fail "read the weights"
"$lu_io" "$(url 1)" write 0 1M 8 || fail "second push"
"$lu_io" "$(url 2)" read 0 1M | cmp -s - "$tmp/checkpointed.bin" && fail "the second push changed no weight"
old=$(in_ns cat "/run/blockps/$name/pid")
in_ns kill -9 "$old"
deadline=$((SECONDS + 60))
until new=$(in_ns cat "/run/blockps/$name/pid" 2>/dev/null) && [ "$new" != "$old" ] && [ -n "$new" ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "systemd did not start the shard again within 60 s"
  sleep 0.5
done
wait_active "after kill -9"
restarts=$(sctl show -p NRestarts --value "blockps-shard@$name")
[ "$restarts" -ge 1 ] || fail "NRestarts is $restarts after the kill"
"$lu_io" "$(url 2)" read 0 1M | cmp -s - "$tmp/checkpointed.bin" ||
  fail "the restarted shard does not hold its checkpoint's weights"
echo "restarted by systemd (tgtd pid $old -> $new, NRestarts $restarts) with the checkpoint's weights"

step "systemctl stop: the final checkpoint, and no tgtd left"
"$lu_io" "$(url 1)" write 0 1M 9 || fail "push after the restart"
"$lu_io" "$(url 2)" read 0 1M >"$tmp/final.bin" || fail "read the weights"
sctl stop "blockps-shard@$name" || fail "systemctl stop failed"
[ "$(sctl is-active "blockps-shard@$name" 2>/dev/null)" = inactive ] || fail "the unit is not inactive after stop"
if in_ns pgrep -f "tgtd -f -C $((1 + control_offset)) " >/dev/null; then fail "tgtd is still running after stop"; fi
sctl start "blockps-shard@$name" || fail "systemctl start after stop failed"
wait_active "start after stop"
"$lu_io" "$(url 2)" read 0 1M | cmp -s - "$tmp/final.bin" ||
  fail "the shard did not come back with the weights it had at stop (no final checkpoint in $ckpt)"
echo "systemd shard test passed"
