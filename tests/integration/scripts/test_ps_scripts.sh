#!/usr/bin/env bash
# Integration test of scripts/ps-up.sh and scripts/ps-down.sh with the example configs configs/shard0.conf and
# configs/shard1.conf, as they are except for the checkpoint directory (moved into a temp dir), on a private
# range of control numbers and ports (BLOCKPS_CONTROL_OFFSET, BLOCKPS_PORT_OFFSET).
#   test_ps_scripts.sh --repo REPO --lu-io PATH-TO-blockps_lu_io
# Exit 0: pass; 77: skipped (not root, tgt missing); anything else: fail. Needs bs_blockps.so installed
# (cmake --install build): without it the test fails, it does not pass vacuously.
set -euo pipefail

# shellcheck source=tests/integration/shell_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_lib.sh"
parse_test_args "$@"

[ "$(id -u)" = 0 ] || skip "tgtd needs root and this is uid $(id -u)"
for tool in tgtd tgtadm tgt-admin iscsi-ls; do
  PATH=$PATH:/usr/sbin:/sbin command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/setup.sh)"
done
export PATH=$PATH:/usr/sbin:/sbin
[ -d "$repo/configs" ] || fail "--repo $repo has no configs/"
[ -x "$lu_io" ] || fail "--lu-io $lu_io is not an executable"

up=$repo/scripts/ps-up.sh
down=$repo/scripts/ps-down.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/blockps-ps-scripts-XXXXXX")
export BLOCKPS_STATE_DIR=$tmp/run
# TgtdInstance picks control numbers 2000..29999 and ports 20000..32767: stay clear of both.
# 32001..32102 (+500 for the blocker): clear of TgtdInstance (2000-29999), the demo test (31001-31002) and
# the fio test (31201-31203), which may run at the same time under ctest -j.
export BLOCKPS_CONTROL_OFFSET=$((32000 + RANDOM % 100))
export BLOCKPS_PORT_OFFSET=$((7000 + RANDOM % 9000))
blocker_control=$((BLOCKPS_CONTROL_OFFSET + 500))
blocker_pid=

cleanup() {
  local rc=$?
  "$down" >/dev/null 2>&1 || true
  if [ -n "$blocker_pid" ]; then
    tgtadm -C "$blocker_control" --op delete --mode system >/dev/null 2>&1 || true
    kill -9 "$blocker_pid" 2>/dev/null || true
    rm -f "/var/run/tgtd/socket.$blocker_control" "/var/run/tgtd/socket.$blocker_control.lock"
  fi
  finish_test "$rc" "$tmp"
}
trap cleanup EXIT

# The real example configs, with only the checkpoint directory moved into $tmp.
confs=()
example_confs_into "$tmp" shard0 shard1
control_of() { awk -v off="$BLOCKPS_CONTROL_OFFSET" '$1 == "blockps-control" || $1 == "control-port" { print $2 + off }' "$1"; }
port_of() { awk -v off="$BLOCKPS_PORT_OFFSET" '$1 == "blockps-portal" { split($2, a, ":"); print a[2] + off }' "$1"; }
c0=$(control_of "${confs[0]}") c1=$(control_of "${confs[1]}")
p0=$(port_of "${confs[0]}") p1=$(port_of "${confs[1]}")
iqn0=iqn.2026-11.io.blockps:shard0 iqn1=iqn.2026-11.io.blockps:shard1
u0=iscsi://127.0.0.1:$p0/$iqn0 u1=iscsi://127.0.0.1:$p1/$iqn1
answers() { tgtadm -C "$1" --op show --mode sys >/dev/null 2>&1; }
alive() { # PID: a live process (zombies of our killed tgtds do not count)
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [ "${s%% *}" != Z ]
}
no_shards_left() {
  local pid
  for pid in "$@"; do
    ! alive "$pid" || fail "tgtd pid $pid is still running"
  done
  ! answers "$c0" || fail "a tgtd still answers on control $c0"
  ! answers "$c1" || fail "a tgtd still answers on control $c1"
  [ -z "$(find "$BLOCKPS_STATE_DIR" -mindepth 1 -type d 2>/dev/null)" ] || fail "state left in $BLOCKPS_STATE_DIR"
}
echo "controls $c0 $c1, ports $p0 $p1, state $BLOCKPS_STATE_DIR"

step "ps-up refuses to start without the module"
if out=$(BLOCKPS_BACKING_STORE_DIR=$tmp/no-module "$up" "${confs[@]}" 2>&1); then
  fail "ps-up started without the module: $out"
fi
grep -q "cmake --install build" <<<"$out" || fail "no 'cmake --install build' hint in: $out"
no_shards_left

module_dir=${BLOCKPS_BACKING_STORE_DIR:-/usr/lib/tgt/backing-store}
[ -f "$module_dir/bs_blockps.so" ] ||
  fail "$module_dir/bs_blockps.so is missing: build the project (ctest points BLOCKPS_BACKING_STORE_DIR at it)"

step "ps-up refuses a module built for another tgt, in one line naming both versions"
[ -f "$other_tgt_module/bs_blockps.so" ] || fail "--other-tgt-module $other_tgt_module has no bs_blockps.so"
running=$(tgtd --version)
if out=$(BLOCKPS_BACKING_STORE_DIR=$other_tgt_module "$up" "${confs[0]}" 2>&1); then
  fail "ps-up started a tgtd with a module built for another tgt: $out"
fi
grep -q "NOT LOADED: this module is built for tgt 0.0.0-not-this-tgtd (its source's structs), the running tgtd is $running" \
  <<<"$out" || fail "ps-up did not say why: $out"
no_shards_left

step "ps-up refuses a file without blockps-portal"
grep -v '^blockps-portal' "${confs[0]}" >"$tmp/noportal.conf"
if out=$("$up" "$tmp/noportal.conf" 2>&1); then fail "ps-up took a file without blockps-portal"; fi
grep -q "blockps-portal" <<<"$out" || fail "unclear message: $out"
no_shards_left

step "ps-up refuses a file with both the control line's names (blockps-control and its old name control-port)"
{ cat "${confs[0]}"; echo "control-port 77"; } >"$tmp/twocontrols.conf"
if out=$("$up" "$tmp/twocontrols.conf" 2>&1); then fail "ps-up took two control numbers"; fi
grep -q "exactly one top-level 'blockps-control N' line.*found 2" <<<"$out" || fail "unclear message: $out"
no_shards_left

step "ps-up refuses a port in use, and leaves nothing running"
setsid tgtd -f -C "$blocker_control" --iscsi "portal=127.0.0.1:$p1" </dev/null >"$tmp/blocker.log" 2>&1 &
blocker_pid=$!
for _ in $(seq 50); do answers "$blocker_control" && break; sleep 0.1; done
answers "$blocker_control" || fail "could not start the blocking tgtd: $(cat "$tmp/blocker.log")"
if out=$("$up" "${confs[@]}" 2>&1); then fail "ps-up started with port $p1 taken: $out"; fi
grep -q "port $p1" <<<"$out" || fail "message does not name port $p1: $out"
no_shards_left
tgtadm -C "$blocker_control" --op delete --mode system >/dev/null
for _ in $(seq 50); do alive "$blocker_pid" || break; sleep 0.1; done
if alive "$blocker_pid"; then kill -9 "$blocker_pid"; fi
rm -f "/var/run/tgtd/socket.$blocker_control" "/var/run/tgtd/socket.$blocker_control.lock"
blocker_pid=

step "ps-up refuses a portal address this host does not have (once loaded, when it opens it), and leaves nothing running"
if out=$(BLOCKPS_PORTAL_ADDR=192.0.2.1 "$up" "${confs[0]}" 2>&1); then fail "ps-up listened on 192.0.2.1: $out"; fi
grep -q "tgtd could not listen on 192.0.2.1:$p0 (port in use? not an address of this host?)" <<<"$out" ||
  fail "unclear message: $out"
no_shards_left
rm -f "$BLOCKPS_STATE_DIR"/*.log

step "ps-up stops what it started when the module refuses an LU, and says why"
sed 's/lr=0.05/lr=-1/' "${confs[0]}" >"$tmp/badlr.conf"
if out=$("$up" "$tmp/badlr.conf" 2>&1); then fail "ps-up took lr=-1: $out"; fi
grep -q "lr=-1: must be" <<<"$out" || fail "the module's reason is not in the message: $out"
no_shards_left
rm -f "$BLOCKPS_STATE_DIR"/*.log

step "ps-up with both example configs; each portal opens only once its shard is loaded"
# tgt-admin, as ps-up finds it on PATH, behind a wrapper that first tries what a worker logging in to the shard
# would meet then: the shard's portal must refuse the connection.
mkdir -p "$tmp/wrap"
cat >"$tmp/wrap/tgt-admin" <<EOF
#!/bin/bash
[ "\$1" = -C ] || exec $(command -v tgt-admin) "\$@"  # ps-up loads a shard with tgt-admin -C CONTROL ...
case \$2 in $c0) port=$p0 ;; $c1) port=$p1 ;; *) port=0 ;; esac
if (exec 3<>"/dev/tcp/127.0.0.1/\$port") 2>/dev/null; then state=open; else state=refused; fi
echo "\$2 \$state" >>"$tmp/portal-while-loading"
exec $(command -v tgt-admin) "\$@"
EOF
chmod +x "$tmp/wrap/tgt-admin"
out=$(PATH=$tmp/wrap:$PATH "$up" "${confs[@]}") || fail "ps-up failed"
echo "$out"
[ "$(cat "$tmp/portal-while-loading")" = "$c0 refused"$'\n'"$c1 refused" ] ||
  fail "a portal took connections while tgt-admin loaded its shard: $(tr '\n' ' ' <"$tmp/portal-while-loading")"
for cp in "$c0:$p0" "$c1:$p1"; do
  portals=$(tgtadm -C "${cp%%:*}" --op show --mode portal)
  [ "$portals" = "Portal: 127.0.0.1:${cp#*:},1" ] || fail "control ${cp%%:*}: portals are not the shard's alone: $portals"
done
[ "$(grep -c "^ps-up: shard[01]: tgtd pid" <<<"$out")" = 2 ] || fail "expected one summary line per shard"
pid0=$(cat "$BLOCKPS_STATE_DIR/shard0/pid") pid1=$(cat "$BLOCKPS_STATE_DIR/shard1/pid")
if ! alive "$pid0" || ! alive "$pid1"; then fail "a shard's tgtd is not running"; fi
tr '\0' '\n' <"/proc/$pid0/environ" | grep -q '^GLIBC_TUNABLES=glibc.malloc.mmap_threshold=' ||
  fail "shard0's tgtd runs without the malloc tunables"
if [ -s "$tmp/lib/shard0/model.ckpt" ]; then fail "checkpoint file should start empty"; fi
[ -e "$tmp/lib/shard0/model.ckpt" ] || fail "ps-up did not create the checkpoint file"
for c in "$c0" "$c1"; do
  show=$(tgtadm -C "$c" --op show --mode target)
  for lun in 1 2 3; do
    grep -q "^ *LUN: $lun\$" <<<"$show" || fail "control $c: no LUN $lun"
  done
  [ "$(grep -c "Backing store type: blockps" <<<"$show")" = 3 ] || fail "control $c: not 3 blockps LUs"
done
ls_out=$(iscsi-ls -s "iscsi://127.0.0.1:$p0") || fail "iscsi-ls on shard0 failed"
echo "$ls_out"
grep -q "$iqn0" <<<"$ls_out" || fail "iscsi-ls does not list $iqn0"
[ "$(grep -c '^Lun:[123] ' <<<"$ls_out")" = 3 ] || fail "iscsi-ls does not list LUNs 1-3"

step "LU capacities"
[ "$("$lu_io" "$u0/1" info)" = "capacity=16777216 block=512" ] || fail "grad LU: $("$lu_io" "$u0/1" info)"
[ "$("$lu_io" "$u0/2" info)" = "capacity=16777216 block=512" ] || fail "weights LU: $("$lu_io" "$u0/2" info)"
[ "$("$lu_io" "$u0/3" info)" = "capacity=1048576 block=512" ] || fail "status LU: $("$lu_io" "$u0/3" info)"
[ "$("$lu_io" "$u1/1" info)" = "capacity=16777216 block=512" ] || fail "shard1 grad LU"

step "configs/cluster.toml names these shards: every URL opens its LU, the grad LUs add up to [model] size"
sed -e "s#127.0.0.1:3261/#127.0.0.1:$p0/#" -e "s#127.0.0.1:3262/#127.0.0.1:$p1/#" "$repo/configs/cluster.toml" \
  >"$tmp/cluster.toml"
grad_total=0
while read -r key url; do
  info=$("$lu_io" "$url" info) || fail "configs/cluster.toml: $key $url does not open: $info"
  if [ "$key" = grad ]; then
    bytes=${info#capacity=}
    grad_total=$((grad_total + ${bytes%% *}))
  fi
done < <(awk -F' = ' '$1 ~ /^(grad|weights|status)$/ { gsub(/"/, "", $2); print $1, $2 }' "$tmp/cluster.toml")
[ "$(grep -c '^\[\[shard\]\]' "$tmp/cluster.toml")" = 2 ] || fail "configs/cluster.toml: not 2 shards"
model=$(awk -F' = ' '$1 == "size" { gsub(/"/, "", $2); print $2 }' "$tmp/cluster.toml")
if [ "$model" != 32M ] || [ "$grad_total" != $((32 << 20)) ]; then
  fail "configs/cluster.toml: [model] size $model, the shards' grad LUs hold $grad_total bytes"
fi

step "one shard behind three path strings; pushes change the weights"
"$lu_io" "$u0/2" write 0 1M 7 || fail "write to the weights LU"
"$lu_io" "$u0/2" verify 0 1M 7 || fail "weights LU does not read back what was written"
"$lu_io" "$u0/1" verify 0 1M 7 || fail "grad LU (a pull) does not return the weights written through LUN 2"
"$lu_io" "$u0/1" write 0 1M 0 || fail "zero-gradient push"
"$lu_io" "$u0/2" verify 0 1M 7 || fail "a zero gradient (momentum buffer 0) changed the weights"
"$lu_io" "$u0/1" write 0 1M 9 || fail "push"
"$lu_io" "$u0/2" differs 0 1M 7 || fail "a push did not change the weights"
status=$("$lu_io" "$u0/3" read 0 4K | tr -d '\0')
[ "${status:0:1}" = "{" ] || fail "status LU does not start with a JSON object: ${status:0:200}"
echo "status page: ${status:0:300}"

step "shards are separate"
"$lu_io" "$u1/2" write 0 1M 11 || fail "write to shard1"
"$lu_io" "$u0/2" differs 0 1M 11 || fail "shard0 holds what was written to shard1"

step "checkpoint on SYNCHRONIZE CACHE, and on close (ps-down)"
"$lu_io" "$u0/1" sync || fail "SYNCHRONIZE CACHE"
[ -s "$tmp/lib/shard0/model.ckpt" ] || fail "no checkpoint after SYNCHRONIZE CACHE"
"$lu_io" "$u0/1" write 0 1M 13 || fail "push after the checkpoint"
"$lu_io" "$u0/2" read 0 16M >"$tmp/snap0" || fail "snapshot"
"$lu_io" "$u1/2" read 0 16M >"$tmp/snap1" || fail "snapshot"

step "ps-down stops both, and is idempotent"
"$down" "${confs[@]}" || fail "ps-down failed"
no_shards_left "$pid0" "$pid1"
"$down" "${confs[@]}" || fail "second ps-down failed"
"$down" || fail "ps-down without arguments failed"

step "ps-up again: the shards come back from their checkpoints"
"$up" "${confs[@]}" >/dev/null || fail "second ps-up failed"
"$lu_io" "$u0/2" read 0 16M | cmp -s - "$tmp/snap0" || fail "shard0 weights differ from before ps-down"
"$lu_io" "$u1/2" read 0 16M | cmp -s - "$tmp/snap1" || fail "shard1 weights differ from before ps-down"
pid0=$(cat "$BLOCKPS_STATE_DIR/shard0/pid") pid1=$(cat "$BLOCKPS_STATE_DIR/shard1/pid")

step "ps-down while a worker pushes: every update that completed is in the final checkpoint"
# A worker pushing 1 MiB gradients at queue depth 8, back to back; ps-down must drain it (targets offline, then deleted) and
# write the final checkpoint instead of killing tgtd with commands in flight. Each WRITE steps the 4 blocks of 256 KiB
# it covers: the blocks' steps in the checkpoint grow by at least 4 per WRITE the worker saw complete, and by at most 4
# per WRITE it sent (those completed, and up to 8 in flight when the target went away).
# block_steps URL: the model's block steps on the status page of the status LU URL.
block_steps() {
  "$lu_io" "$1" read 0 1M | tr -d '\0' |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["model"]["block_steps"])'
}
steps_before=$(block_steps "$u0/3") || fail "cannot read shard0's status page"
"$lu_io" "$u0/1" pushloop 0 16M 17 2>"$tmp/pushloop.log" &
pusher=$!
sleep 1
"$down" "${confs[@]}" >"$tmp/down.log" 2>&1 || { cat "$tmp/down.log"; fail "ps-down under load failed"; }
grep -q "NOT written" "$tmp/down.log" && { cat "$tmp/down.log"; fail "ps-down under load lost the final checkpoint"; }
wait "$pusher" || true
no_shards_left "$pid0" "$pid1"
"$up" "${confs[@]}" >/dev/null || fail "ps-up after ps-down under load failed"
completed=$(sed -n 's/^blockps_lu_io: pushloop: \([0-9]*\) writes.*/\1/p' "$tmp/pushloop.log")
if [ -z "$completed" ] || [ "$completed" -eq 0 ]; then
  cat "$tmp/pushloop.log"
  fail "the worker completed no push under load"
fi
steps_after=$(block_steps "$u0/3") || fail "cannot read shard0's status page after ps-up"
gained=$((steps_after - steps_before))
echo "  $completed WRITEs of 1 MiB completed under load; the checkpoint gained $gained block steps"
[ "$gained" -ge $((4 * completed)) ] ||
  fail "the checkpoint lost pushes: $completed WRITEs completed (>= $((4 * completed)) block steps), it gained $gained"
[ "$gained" -le $((4 * (completed + 8))) ] ||
  fail "the checkpoint holds more steps than were sent: $completed WRITEs completed, up to 8 in flight, it gained $gained"
"$lu_io" "$u0/2" read 0 16M | cmp -s - "$tmp/snap0" && fail "the pushes made under load are not in the weights"
pid0=$(cat "$BLOCKPS_STATE_DIR/shard0/pid") pid1=$(cat "$BLOCKPS_STATE_DIR/shard1/pid")
"$down" || fail "ps-down failed"
no_shards_left "$pid0" "$pid1"
echo "PASS"
