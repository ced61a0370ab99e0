#!/bin/bash
# tests/vm hook: a 2-worker training run in mode=sync through the C API (libblockps, posix transport with
# libaio on the kernel initiator's /dev/sdX), each worker its own process AND its own iSCSI session: worker 0
# over iSER, worker 1 over TCP (a sync shard counts one worker per I_T nexus; two processes on one open-iscsi
# session would be one worker pushing twice). The shards are VM-only configs (configs/vm-sync*.conf:
# mode=sync;workers=2;min_workers=2, plain SGD lr 0.5), started beside the example ones.
#   hooks/sync-train-2workers.sh ISER_TOML TCP_TOML OUTDIR     (main.sh runs it; the TOMLs are not used)
# Passes when both workers (client/examples/sync_train.c) find every round's weights equal to "the average of
# the two gradients applied once" (w - lr * (w - mean target)), the distance to the optimum falls as BSP
# predicts, and both read bit-identical weights every round (per-round FNV-1a digests compared here).
set -uo pipefail
out=$3
# shellcheck source=tests/vm/guest/hooks/shards.sh
. "$(dirname "${BASH_SOURCE[0]}")/shards.sh"
prog=$TOP/build/client/blockps-sync-train
[ -x "$prog" ] || die "no $prog in the payload (tests/vm/run.sh copies it)"
ROUNDS=${SYNC_ROUNDS:-8}
SYNC_LR=0.5 # the configs' lr

shards_up "$repo/tests/vm/guest/configs/vm-sync0.conf" "$repo/tests/vm/guest/configs/vm-sync1.conf"
shards_attach iser "$out/w0.toml"
shards_attach tcp "$out/w1.toml"
sessions=$(iscsiadm -m session)
echo "$sessions"
# Two sessions per shard, one per transport: two I_T nexuses, i.e. two workers for the shard.
for s in 0 1; do
  [ "$(grep -c "^iser: .*vm-sync$s-iser" <<<"$sessions")" = 1 ] || die "shard vm-sync$s: expected one iSER session"
  [ "$(grep -c "^tcp: .*vm-sync$s\b" <<<"$sessions")" = 1 ] || die "shard vm-sync$s: expected one TCP session"
done
for w in 0 1; do printf '\n[client]\nengine = "libaio"\nqueue_depth = 4\n' >>"$out/w$w.toml"; done

say "2 workers, $ROUNDS rounds"
pids=()
for w in 0 1; do
  timeout 240 "$prog" "$out/w$w.toml" --rank $w --workers 2 --rounds "$ROUNDS" --lr $SYNC_LR \
    --digests "$out/w$w.digests" >"$out/w$w.log" 2>&1 &
  pids+=($!)
done
rc=0
for w in 0 1; do
  wait "${pids[$w]}" || { rc=$?; echo "worker $w exited $rc"; }
  sed "s/^/  w$w: /" "$out/w$w.log"
done
[ "$rc" = 0 ] || die "a worker failed (exit $rc; 124 = timed out)"
[ "$(wc -l <"$out/w0.digests")" = $((ROUNDS + 1)) ] || die "worker 0 wrote $(wc -l <"$out/w0.digests") digests"
cmp "$out/w0.digests" "$out/w1.digests" || die "the workers read different weights in some round (digests differ)"
echo "both workers read identical weights in all $((ROUNDS + 1)) pulls"
"$TOP/build/client/cli/blockps" -c "$out/w0.toml" status || die "blockps status"
