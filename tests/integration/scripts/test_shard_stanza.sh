#!/usr/bin/env bash
# The `blockps-shard PATH 'OPTIONS'` line of a shard config (scripts/ps-up.sh, scripts/lib/blockps-tgt.sh) with a
# real tgtd: configs/shard0.conf (the line) and tests/integration/configs/shard0-backing-stores.conf (the same
# shard as three explicit <backing-store> blocks) each start with all three LUs serving one shard;
# `ps-up.sh --print-tgt-conf` makes the line into exactly the blocks of the explicit spelling (and admins= of
# configs/sync-secure.conf into the status LU's only); a target with the line keeps an explicit LU on LUN 4; wrong
# lines are refused with FILE:LINE and what is allowed, and nothing is started.
#   test_shard_stanza.sh --repo REPO --lu-io PATH-TO-blockps_lu_io
# Exit 0: pass; 77: skipped (not root, tgt missing); anything else: fail. Needs bs_blockps.so (ctest points
# BLOCKPS_BACKING_STORE_DIR at the build's).
set -euo pipefail

# shellcheck source=tests/integration/shell_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_lib.sh"
parse_test_args "$@"

require_root_and_tgt
[ -x "$lu_io" ] || fail "--lu-io $lu_io is not an executable"

up=$repo/scripts/ps-up.sh
down=$repo/scripts/ps-down.sh
explicit=$repo/tests/integration/configs/shard0-backing-stores.conf
tmp=$(mktemp -d "${TMPDIR:-/tmp}/blockps-stanza-XXXXXX")
tmp=$(realpath "$tmp") # ps-up names files by their real path
export BLOCKPS_STATE_DIR=$tmp/run
# Controls 31851-31852, ports 42761-42762: clear of TgtdInstance (2000-29999 / 20000-32767) and the other
# script tests.
export BLOCKPS_CONTROL_OFFSET=31850 BLOCKPS_PORT_OFFSET=39500
cleanup() {
  local rc=$?
  "$down" >/dev/null 2>&1 || true
  finish_test "$rc" "$tmp"
}
trap cleanup EXIT

c0=$((1 + BLOCKPS_CONTROL_OFFSET)) c1=$((2 + BLOCKPS_CONTROL_OFFSET))
iqn0=iqn.2026-11.io.blockps:shard0
u0=iscsi://127.0.0.1:$((3261 + BLOCKPS_PORT_OFFSET))/$iqn0
answers() { tgtadm -C "$1" --op show --mode sys >/dev/null 2>&1; }
no_shards_left() {
  ! answers "$c0" || fail "a tgtd answers on control $c0"
  ! answers "$c1" || fail "a tgtd answers on control $c1"
  [ -z "$(find "$BLOCKPS_STATE_DIR" -mindepth 1 -type d 2>/dev/null)" ] || fail "state left in $BLOCKPS_STATE_DIR"
}
# The LU blocks of a targets.conf, one line each (path, lun, bs-type, bsopts), for comparing spellings.
lu_lines() { grep -E '^[[:space:]]*(<backing-store|lun|bs-type|bsopts)[[:space:]]' | sed 's/^[[:space:]]*//'; }

confs=()
example_confs_into "$tmp" shard0 shard1
new0=${confs[0]} new1=${confs[1]}
old0=$tmp/shard0-backing-stores.conf
sed "s#/var/lib/blockps/#$tmp/lib/#g" "$explicit" >"$old0"

step "--print-tgt-conf: the line makes the LUs of the explicit spelling"
printed=$("$up" --print-tgt-conf "$repo/configs/shard0.conf") || fail "--print-tgt-conf failed: $printed"
diff <(lu_lines <"$explicit") <(lu_lines <<<"$printed") ||
  fail "configs/shard0.conf's blockps-shard line does not make the LUs of $explicit"
grep -q "blockps-shard /" <<<"$(grep -v '^[[:space:]]*#' <<<"$printed")" && fail "the printed file still has the line"
printed=$("$up" --print-tgt-conf "$repo/configs/sync-secure.conf") || fail "--print-tgt-conf sync-secure failed"
if [ "$(grep bsopts <<<"$printed" | grep -c 'admins=')" != 1 ] ||
  ! grep -q "bsopts 'role=status;admins=iqn.2026-11.io.blockps:admin;" <<<"$printed"; then
  fail "admins= is not on the status LU alone: $(grep bsopts <<<"$printed")"
fi
"$up" --print-tgt-conf "$explicit" | tail -n +2 | cmp -s - "$explicit" ||
  fail "--print-tgt-conf changed a file without blockps-shard lines"

step "wrong lines: FILE:LINE and what is allowed, before anything starts"
line=$(grep -n '^[[:space:]]*blockps-shard ' "$new0" | cut -d: -f1)
opts="'size=16M;dtype=f32'"
bad=0
# expect_refused LINE MESSAGE < FILE-TEXT: ps-up (with a good file beside it) and --print-tgt-conf refuse the
# text with "FILE:LINE: ..." naming MESSAGE, and nothing starts.
expect_refused() {
  local file out
  bad=$((bad + 1))
  file=$tmp/bad$bad.conf
  cat >"$file"
  if out=$("$up" "$new1" "$file" 2>&1); then fail "ps-up took bad file $bad: $out"; fi
  grep -F "ps-up: ERROR: $file:$1: " <<<"$out" | grep -qF "$2" || fail "bad file $bad: expected '$file:$1: ...$2' in: $out"
  no_shards_left
  if out=$("$up" --print-tgt-conf "$file" 2>&1); then fail "--print-tgt-conf took bad file $bad: $out"; fi
  grep -F "$file:$1: " <<<"$out" | grep -qF "$2" || fail "--print-tgt-conf, bad file $bad: $out"
}
expect_refused "$line" "blockps-shard: the checkpoint path is missing (expected blockps-shard /ABSOLUTE/PATH/model.ckpt" \
  < <(sed "${line}s#blockps-shard [^ ]*#blockps-shard#" "$new0")
expect_refused "$line" "must be absolute" < <(sed "${line}s#blockps-shard /#blockps-shard #" "$new0")
expect_refused "$line" "role= is not an option of blockps-shard: the line makes LUN 1 role=grad, LUN 2 role=weights and LUN 3 role=status" \
  < <(sed "${line}s#'size=#'role=grad;size=#" "$new0")
expect_refused $((line + 1)) "a second blockps-shard in <target $iqn0> (the first is on line $line): one shard per target" \
  < <(sed "${line}a\\    blockps-shard $tmp/lib/other/model.ckpt $opts" "$new0")
expect_refused $((line + 1)) "lun 2 of backing-store $tmp/lib/plain.img clashes with the blockps-shard on line $line (its LUs take LUNs 1 grad, 2 weights, 3 status): give this LU lun 4 or above" \
  < <(sed "${line}a\\    <backing-store $tmp/lib/plain.img>\\n        lun 2\\n    </backing-store>" "$new0")
expect_refused "$line" "backing-store $tmp/lib/shard0/./model.ckpt is the checkpoint of the blockps-shard on line $((line + 3))" \
  < <(sed "${line}i\\    <backing-store $tmp/lib/shard0/./model.ckpt>\\n        lun 7\\n    </backing-store>" "$new0")
expect_refused $(($(wc -l <"$new0") + 1)) "blockps-shard belongs inside a <target IQN> block" \
  < <(cat "$new0"; echo "blockps-shard $tmp/lib/x/model.ckpt $opts")
expect_refused "$line" "unknown key 'blockps-shards' in <target $iqn0>" < <(sed "${line}s#blockps-shard #blockps-shards #" "$new0")
expect_refused "$line" "without quotes inside" < <(sed "${line}s#'size=16M;#'size=16M;x='y';#" "$new0")
expect_refused "$line" '"#" starts a comment in a config file (tgt-admin reads it so too)' \
  < <(sed "${line}s|'size=16M;|'size=16M;init=file:/tmp/a#b;|" "$new0")

# serves_one_shard: LUNs 1-3 of shard0 (16 MiB) are blockps LUs of one shard: grad, weights and status.
serves_one_shard() {
  local show status
  show=$(tgtadm -C "$c0" --op show --mode target)
  for lun in 1 2 3; do grep -q "^ *LUN: $lun\$" <<<"$show" || fail "no LUN $lun: $show"; done
  [ "$(grep -c "Backing store type: blockps" <<<"$show")" = 3 ] || fail "not 3 blockps LUs: $show"
  [ "$("$lu_io" "$u0/1" info)" = "capacity=16777216 block=512" ] || fail "grad LU: $("$lu_io" "$u0/1" info)"
  [ "$("$lu_io" "$u0/2" info)" = "capacity=16777216 block=512" ] || fail "weights LU: $("$lu_io" "$u0/2" info)"
  [ "$("$lu_io" "$u0/3" info)" = "capacity=1048576 block=512" ] || fail "status LU: $("$lu_io" "$u0/3" info)"
  "$lu_io" "$u0/2" write 0 1M "$1" || fail "write to the weights LU"
  "$lu_io" "$u0/1" verify 0 1M "$1" || fail "the grad LU (a pull) does not return the weights written through LUN 2"
  "$lu_io" "$u0/1" write 0 1M 9 || fail "push"
  "$lu_io" "$u0/2" differs 0 1M "$1" || fail "a push did not change the weights"
  status=$("$lu_io" "$u0/3" read 0 4K | tr -d '\0')
  [ "${status:0:1}" = "{" ] || fail "the status LU does not read as a JSON object: ${status:0:200}"
}

step "the blockps-shard line (configs/shard0.conf): LUNs 1-3 serve one shard"
"$up" "$new0" || fail "ps-up configs/shard0.conf failed"
serves_one_shard 7
grep -q "blockps-shard" "$BLOCKPS_STATE_DIR/shard0/targets.conf" || fail "the targets.conf given to tgt-admin does not say where its LUs came from"
"$down" "$new0" >/dev/null || fail "ps-down failed"
no_shards_left

step "the explicit spelling (three <backing-store> blocks): LUNs 1-3 serve one shard"
rm -rf "$tmp/lib/shard0"
"$up" "$old0" || fail "ps-up of the explicit spelling failed"
serves_one_shard 5
"$down" "$old0" >/dev/null || fail "ps-down failed"
no_shards_left

step "beside the line, an explicit LU on LUN 4"
head -c 1M /dev/zero >"$tmp/lib/plain.img"
sed "${line}a\\    <backing-store $tmp/lib/plain.img>\\n        lun 4\\n    </backing-store>" "$new0" >"$tmp/mixed.conf"
"$up" "$tmp/mixed.conf" || fail "ps-up of a target with the line and a LUN 4 block failed"
show=$(tgtadm -C "$c0" --op show --mode target)
[ "$(grep -c "Backing store type: blockps" <<<"$show")" = 3 ] || fail "not 3 blockps LUs: $show"
grep -q "Backing store path: $tmp/lib/plain.img" <<<"$show" || fail "LUN 4 did not come up: $show"
"$lu_io" "$u0/4" write 0 64K 3 || fail "write to LUN 4"
"$lu_io" "$u0/4" verify 0 64K 3 || fail "LUN 4 does not read back what was written"
"$down" "$tmp/mixed.conf" >/dev/null || fail "ps-down failed"
no_shards_left
echo "PASS"
