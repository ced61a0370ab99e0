#!/usr/bin/env bash
# configs/sync-secure.conf through scripts/ps-up.sh, as it is except for the checkpoint directory: only
# initiators with the CHAP account log in and push (no CHAP, a wrong password: refused at login); with the
# address ACL moved to an address that is not ours, an unlisted name is refused even with the right account; NOP-In is set on the
# target (blockps-nop-in); a sync round of two workers closes, and the status page shows mode sync.
#   test_secure_shard.sh --repo REPO --lu-io PATH-TO-blockps_lu_io
# Exit 0: pass; 77: skipped (not root, tgt missing); anything else: fail.
set -euo pipefail

# shellcheck source=tests/integration/shell_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_lib.sh"
parse_test_args "$@"

require_root_and_tgt
[ -x "$lu_io" ] || fail "--lu-io $lu_io is not an executable"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/blockps-secure-XXXXXX")
export BLOCKPS_STATE_DIR=$tmp/run
# Control 31403, port 44263: clear of TgtdInstance (2000-29999 / 20000-32767) and the other script tests.
export BLOCKPS_CONTROL_OFFSET=31400 BLOCKPS_PORT_OFFSET=41000
cleanup() {
  local rc=$?
  "$repo/scripts/ps-down.sh" >/dev/null 2>&1 || true
  finish_test "$rc" "$tmp"
}
trap cleanup EXIT

confs=()
example_confs_into "$tmp" sync-secure
step "ps-up configs/sync-secure.conf"
"$repo/scripts/ps-up.sh" "$tmp/sync-secure.conf" || fail "ps-up could not start configs/sync-secure.conf"
control=$((3 + BLOCKPS_CONTROL_OFFSET))
portal=127.0.0.1:$((3263 + BLOCKPS_PORT_OFFSET))
target=iqn.2026-11.io.blockps:sync-secure

show=$(tgtadm -C "$control" --op show --mode target)
grep -q "iqn.2026-11.io.blockps:worker0" <<<"$show" || fail "the initiator-name ACL is not on the target: $show"
grep -q "worker" <<<"$(tgtadm -C "$control" --op show --mode account)" || fail "the CHAP account is missing"
nop=$(tgtadm -C "$control" --op show --mode target --tid 1)
if ! grep -q "nop_interval=5" <<<"$nop" || ! grep -q "nop_count=3" <<<"$nop"; then
  fail "ps-up did not set NOP-In from blockps-nop-in: $nop"
fi

url() { echo "iscsi://$1$portal/$target/$2"; }
io() { BLOCKPS_INITIATOR_IQN=$1 "$lu_io" "${@:2}"; }

step "refused: no CHAP, and a wrong password"
if out=$(io iqn.2026-11.io.blockps:worker0 "$(url '' 1)" write 0 64K 1 2>&1); then
  fail "a login without CHAP was accepted: $out"
fi
if out=$(io iqn.2026-11.io.blockps:worker0 "$(url 'worker%wrong@' 1)" write 0 64K 1 2>&1); then
  fail "a wrong CHAP password was accepted: $out"
fi

step "accepted: worker0 and worker1 with CHAP push a sync round; both pulls come back"
good() { url 'worker%blockps-secret-1@' "$1"; }
io iqn.2026-11.io.blockps:worker0 "$(good 1)" pushpull 0 4M 1 >"$tmp/w0.out" 2>&1 &
w0=$!
io iqn.2026-11.io.blockps:worker1 "$(good 1)" pushpull 0 4M 2 >"$tmp/w1.out" 2>&1 &
w1=$!
wait "$w0" || fail "worker0's push/pull failed: $(cat "$tmp/w0.out")"
wait "$w1" || fail "worker1's push/pull failed: $(cat "$tmp/w1.out")"
if ! grep -q pulled "$tmp/w0.out" || ! grep -q pulled "$tmp/w1.out"; then fail "a worker did not pull"; fi
page=$(io iqn.2026-11.io.blockps:worker0 "$(good 3)" read 0 64K | tr -d '\0')
grep -q '"mode": "sync"' <<<"$page" || fail "the status page does not say mode sync: $page"
grep -q '"rounds_min": 1' <<<"$page" || fail "the round did not close: $page"

step "control lines: refused from a worker (ACCESS DENIED), accepted from the administrator (admins=)"
if out=$(io iqn.2026-11.io.blockps:worker0 "$(good 3)" control $'lr=0.5\n' 2>&1); then
  fail "a worker's control write was accepted: $out"
fi
grep -q "(0x2002)" <<<"$out" || fail "a worker's control write was not refused with ACCESS DENIED (0x20/0x02): $out"
page=$(io iqn.2026-11.io.blockps:worker0 "$(good 3)" read 0 64K | tr -d '\0')
grep -Eq '"lr": 0\.1[0-9]*,' <<<"$page" || fail "the refused control write changed lr: $page"
out=$(io iqn.2026-11.io.blockps:admin "$(good 3)" control $'lr=0.5\n' 2>&1) ||
  fail "the administrator's control write was refused: $out"
page=$(io iqn.2026-11.io.blockps:worker0 "$(good 3)" read 0 64K | tr -d '\0')
grep -Eq '"lr": 0\.5[0-9]*,' <<<"$page" || fail "the administrator's lr=0.5 did not apply: $page"
grep -q "control write from iqn.2026-11.io.blockps:worker0 refused: not an administrator" \
  "${BLOCKPS_STATE_DIR:-/run/blockps}/sync-secure/tgtd.log" || fail "tgtd's log does not name the refused initiator"
"$repo/scripts/ps-down.sh" >/dev/null || fail "ps-down failed"

step "refused: an initiator whose address and name are not listed, even with the right account"
sed -i "s#^    initiator-address 127.0.0.1#    initiator-address 192.0.2.1#" "$tmp/sync-secure.conf"
grep -q "initiator-address 192.0.2.1" "$tmp/sync-secure.conf" || fail "configs/sync-secure.conf has no initiator-address 127.0.0.1 line"
"$repo/scripts/ps-up.sh" "$tmp/sync-secure.conf" || fail "ps-up could not start the copy with another address ACL"
if out=$(io iqn.2026-11.io.blockps:intruder "$(good 1)" write 0 64K 1 2>&1); then
  fail "an unlisted initiator (address and name) logged in and wrote: $out"
fi
# ... while a listed name is admitted from the unlisted address (tgt: either ACL admits).
io iqn.2026-11.io.blockps:worker0 "$(good 1)" write 0 64K 1 || fail "listed worker0 was refused"
echo "PASS"
