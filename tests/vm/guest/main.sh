#!/bin/bash
# The kernel-path test inside the VM (tests/vm/run.sh boots it; blockps-vm-init runs this as guest-entry).
# Named steps, each in its own time limit; results go to the 9p share (results/): steps.tsv (NAME STATUS
# SECONDS REASON), one log per step, the tgtd logs, dmesg, iscsid's log (syslog.log) and RESULT (PASS or FAIL).
#   main.sh                 all steps (what the VM runs)
#   main.sh --one STEP      one step (how main.sh runs each step under `timeout`)
# A step prints "SKIPPED: reason" and exits 77 when what it needs is not in the tree yet; that is reported
# loudly and does not fail the run. Hooks for programs of other parts: tests/vm/guest/hooks/NAME.sh (see
# tests/vm/README.md).
set -uo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
share=/mnt/blockps
res=$share/results
top=/opt/blockps            # the payload, copied from the share
repo=$top/repo
build=$top/build
state=/run/vmtest           # what steps hand to later steps
IP=10.99.0.1                # Soft-RoCE address: the shards' portals (BLOCKPS_PORTAL_ADDR)
export BLOCKPS_PORTAL_ADDR=$IP BLOCKPS_BACKING_STORE_DIR=$build/tgt-modules
export LD_LIBRARY_PATH=$build/client
# The example configs' optimizer (configs/shard*.conf): what the update checks expect.
LR=0.05 MU=0.9
CONFS=("$repo/configs/shard0.conf" "$repo/configs/shard1.conf")
WORKER_IQN=iqn.2026-11.io.blockps:worker0      # listed in the configs' initiator-name ACLs (iSER needs it)
LIBISCSI_IQN=iqn.2026-11.io.blockps:worker1
# shellcheck disable=SC1091 # written by run.sh
[ -f "$share/params" ] && . "$share/params"
FIO_RUNTIME=${FIO_RUNTIME:-2}
STEPS_FILTER=${STEPS_FILTER:-}
export NUMPY_WORKLOAD=${NUMPY_WORKLOAD:-ci}  # the numpy-worker hook's workload (run.sh --numpy)

# From the share: the driver runs before it copies the payload to $top.
# shellcheck source=tests/vm/guest/common.sh
. "$share/payload/repo/tests/vm/guest/common.sh"

# --- steps ---------------------------------------------------------------------------------------------------
step_rdma() {
  modprobe -a rdma_rxe ib_iser iscsi_tcp sd_mod rdma_ucm ib_uverbs veth || die "modprobe"
  ip link set lo up
  # rxe cannot sit on lo: a veth carries it; initiator and target share the address (rxe's loopback path).
  ip link add veth0 type veth peer name veth1 || die "veth"
  ip addr add $IP/24 dev veth0
  ip link set veth0 up
  ip link set veth1 up
  rdma link add rxe0 type rxe netdev veth0 || die "rdma link add rxe0"
  rdma link show
  ibv_devinfo -d rxe0 | grep -E 'state|link_layer|active_mtu'
  ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE || die "rxe0 port is not active"
}

step_ps_up() {
  mkdir -p /var/lib/blockps
  BLOCKPS_ISER=yes BLOCKPS_ISER_POOL_MB=128 "$repo/scripts/ps-up.sh" "${CONFS[@]}" || die "ps-up.sh"
  rdma resource show cm_id | tee "$state/cm_id"
  for port in 3261 3262; do
    grep -q "src-addr 0.0.0.0:$port\b.*LISTEN\|state LISTEN.*src-addr 0.0.0.0:$port\b" "$state/cm_id" ||
      grep -q "LISTEN.*:$port\b" "$state/cm_id" || die "no iSER (RDMA CM) listener on port $port"
  done
  ss -ltn | grep -E ":(3261|3262)\b" || die "no TCP portals"
}

attach() { # TRANSPORT OUT
  "$repo/scripts/attach.sh" --transport "$1" --conf "${CONFS[0]}" --conf "${CONFS[1]}" --out "$2" --timeout 90 ||
    die "attach.sh --transport $1"
  cat "$2"
  udevadm settle -t 30
}

step_attach_iser() {
  echo "InitiatorName=$WORKER_IQN" >/etc/iscsi/initiatorname.iscsi
  # iscsid (it reads the name above when it starts) with its log in the results, debug level 6: logins, errors,
  # recovery, which the attach and shard-restart steps test. The guest runs no syslog daemon: syslog_sink.py reads
  # /dev/log into the file. attach.sh starts no second iscsid.
  setsid python3 "$repo/tests/vm/guest/syslog_sink.py" /dev/log "$res/syslog.log" </dev/null >/dev/null 2>&1 &
  for _ in $(seq 50); do [ -S /dev/log ] && break; sleep 0.1; done
  iscsid -d 6 || die "iscsid would not start"
  attach iser "$state/iser.toml"
  iscsiadm -m session -P 1 | tee "$state/sessions.iser"
  [ "$(grep -c 'Iface Transport: iser' "$state/sessions.iser")" = 2 ] || die "expected 2 iSER sessions"
  for s in 0 1; do
    for k in grad weights status; do
      d=$(dev_of "$state/iser.toml" $s $k)
      [ -b "$d" ] || die "shard $s $k: $d is not a block device"
      mskb=$(cat "/sys/block/${d#/dev/}/queue/max_sectors_kb")
      echo "shard$s $k: $d max_sectors_kb=$mskb"
      # Our blocks (256 KiB) must fit one iSER command (tgt's 512 KiB buffers).
      [ "$mskb" -le 512 ] || die "$d: max_sectors_kb $mskb > 512 over iSER"
    done
  done
  lsblk -o NAME,SIZE,TRAN,MODEL
  # attach.sh drops the partitions the kernel's scan may have found in weight bytes.
  if lsblk -nr -o NAME,TYPE | awk '$2 == "part"' | grep .; then die "partitions left on the LUs"; fi
}

step_attach_tcp() {
  attach tcp "$state/tcp.toml"
  [ "$(iscsiadm -m session | grep -c '^tcp:')" = 2 ] || die "expected 2 TCP sessions"
  [ "$(iscsiadm -m session | grep -c '^iser:')" = 2 ] || die "the iSER sessions are gone"
}

step_posix_weights() {
  local py=$repo/tests/vm/guest/devcheck.py
  # shard0: write over iSER, read back over iSER (weights and grad LU) and over TCP.
  python3 "$py" weights "$(dev_of "$state/iser.toml" 0 weights)" "$(dev_of "$state/iser.toml" 0 weights)" \
    "$(dev_of "$state/iser.toml" 0 grad)" "$(dev_of "$state/tcp.toml" 0 weights)" --offset 1048576 || die "shard0"
  # shard1: write over TCP, read over iSER.
  python3 "$py" weights "$(dev_of "$state/tcp.toml" 1 weights)" "$(dev_of "$state/iser.toml" 1 weights)" \
    "$(dev_of "$state/iser.toml" 1 grad)" --offset 2097152 || die "shard1"
}

step_posix_grad() {
  local py=$repo/tests/vm/guest/devcheck.py
  python3 "$py" grad "$(dev_of "$state/iser.toml" 0 grad)" "$(dev_of "$state/iser.toml" 0 grad)" \
    --lr $LR --momentum $MU --offset 4194304 || die "shard0 over iSER"
  python3 "$py" grad "$(dev_of "$state/iser.toml" 1 grad)" "$(dev_of "$state/tcp.toml" 1 grad)" \
    --lr $LR --momentum $MU --offset 4194304 || die "shard1: push over iSER, pull over TCP"
  python3 "$py" grad "$(dev_of "$state/tcp.toml" 0 grad)" "$(dev_of "$state/iser.toml" 0 grad)" \
    --lr $LR --momentum $MU --offset 8388608 || die "shard0: push over TCP, pull over iSER"
}

step_client_posix_libaio() {
  [ -x "$top/bin/client_check" ] || die "no client_check in the payload"
  { cat "$state/iser.toml"; printf '\n[client]\nengine = "libaio"\nqueue_depth = 4\n'; } >"$state/iser-libaio.toml"
  "$top/bin/client_check" "$state/iser-libaio.toml" $LR $MU || die "libblockps posix/libaio over the iSER devices"
  "$build/client/cli/blockps" -c "$state/iser-libaio.toml" status || die "blockps status"
}

step_client_libiscsi_iser() {
  [ -x "$top/bin/client_check" ] || die "no client_check in the payload"
  {
    printf '[model]\nsize = "32M"\ndtype = "f32"\nblock = "256K"\n\n[client]\ninitiator = "%s"\n' "$LIBISCSI_IQN"
    for s in 0 1; do
      printf '\n[[shard]]\n'
      for k in grad:1 weights:2 status:3; do
        printf '%s = "iser://%s:%d/iqn.2026-11.io.blockps:shard%d-iser/%d"\n' "${k%:*}" $IP $((3261 + s)) $s "${k#*:}"
      done
    done
  } >"$state/libiscsi-iser.toml"
  cat "$state/libiscsi-iser.toml"
  # libiscsi 1.19's iSER transport crashed (SIGSEGV) on commands above its fixed 256 KiB buffers; libblockps
  # now keeps iser:// commands within them (kLibiscsiIserMaxCommandBytes). A crash leaves a core in the results.
  ulimit -c unlimited
  echo "$res/core.%e.%p" >/proc/sys/kernel/core_pattern
  local rc=0
  "$top/bin/client_check" "$state/libiscsi-iser.toml" $LR $MU || rc=$?
  [ "$rc" != 139 ] || die "client_check over iser:// URLs died of SIGSEGV (libiscsi's iSER transport; core in the results)"
  [ "$rc" = 0 ] || die "libblockps libiscsi over iser:// URLs (exit $rc)"
  # The default [client] max_request (1M) was capped to 256K for these sessions: say so in the log.
  echo "libiscsi over iser:// with the default max_request: push/pull/update checks passed"
}

step_fio() {
  local j out=$state/fio
  mkdir -p "$out"
  # Short runs: every section runtime=FIO_RUNTIME, no ramp (the job files' own values are for benchmarks).
  for j in matrix-libaio-qd16 matrix-psync-qd1 all-shards verify-weights stress; do
    sed -E "s/^(runtime)=.*/\1=$FIO_RUNTIME/; s/^(ramp_time)=.*/\1=0/" "$repo/fio_jobs/$j.fio" >"$out/$j.fio"
  done
  export BLOCKPS_GRAD_DEV BLOCKPS_GRAD_DEV0 BLOCKPS_GRAD_DEV1 BLOCKPS_WEIGHTS_DEV BLOCKPS_STATUS_DEV
  BLOCKPS_GRAD_DEV=$(dev_of "$state/iser.toml" 0 grad)
  BLOCKPS_GRAD_DEV0=$BLOCKPS_GRAD_DEV BLOCKPS_GRAD_DEV1=$(dev_of "$state/iser.toml" 1 grad)
  BLOCKPS_WEIGHTS_DEV=$(dev_of "$state/iser.toml" 0 weights) BLOCKPS_STATUS_DEV=$(dev_of "$state/iser.toml" 0 status)
  for j in matrix-libaio-qd16 all-shards verify-weights stress; do
    say "fio $j"
    fio --output-format=terse --terse-version=3 "$out/$j.fio" >"$out/$j.terse" 2>"$out/$j.err" ||
      die "fio $j: $(tail -n 5 "$out/$j.err")"
    # terse v3: field 5 = errors of the job
    awk -F';' -v j="$j" '{ printf "  %s/%s: read %s KiB/s, write %s KiB/s, err %s\n", j, $3, $7, $48, $5; if ($5 != 0) bad = 1 }
      END { exit bad }' "$out/$j.terse" || die "fio $j reported errors"
  done
  # TCP too, one job.
  BLOCKPS_GRAD_DEV=$(dev_of "$state/tcp.toml" 1 grad)
  fio --output-format=terse --terse-version=3 "$out/matrix-psync-qd1.fio" >"$out/psync-tcp.terse" 2>"$out/psync-tcp.err" ||
    die "fio matrix-psync-qd1 over TCP: $(tail -n 5 "$out/psync-tcp.err")"
}

# A job claimed through the kernel's iSER session of shard 0 (job= on its status device) fences the shard: the TCP
# session's push is refused with RESERVATION CONFLICT (an I/O error), the iSER session's is served; `release` ends it.
step_job_fence() {
  python3 "$repo/tests/vm/guest/devcheck.py" fence "$(dev_of "$state/iser.toml" 0 status)" \
    "$(dev_of "$state/iser.toml" 0 grad)" "$(dev_of "$state/tcp.toml" 0 grad)" || die "job fence over the kernel path"
}

step_fsync_checkpoint() {
  python3 "$repo/tests/vm/guest/devcheck.py" fsync "$(dev_of "$state/iser.toml" 1 grad)" \
    /var/lib/blockps/shard1/model.ckpt || die "fsync over iSER"
  python3 "$repo/tests/vm/guest/devcheck.py" fsync "$(dev_of "$state/tcp.toml" 0 grad)" \
    /var/lib/blockps/shard0/model.ckpt || die "fsync over TCP"
}

# The kernel initiator's counterpart of libblockps' [client] reconnect_s: open-iscsi's replacement_timeout (a
# session's recovery_tmo in sysfs): how long I/O on a lost session waits for the session to come back before it
# fails up to the application. Shard 1's tgtd is killed with -9 and started again by ps-up.sh (as a supervisor
# would), first with a replacement_timeout that outlasts the outage: a read issued meanwhile waits and then
# returns the weights of the shard's last checkpoint; then with a short one and no restart in time: the read
# fails with EIO instead of hanging, and once the shard is back the session recovers by itself (iscsid keeps
# logging in) and I/O works again.
session_of() { # DEV: the iSCSI session (sessionN) a /dev/sdX belongs to
  readlink -f "/sys/block/${1#/dev/}/device" | grep -o 'session[0-9]*' | head -n 1
}
restart_shard1() {
  BLOCKPS_ISER=yes BLOCKPS_ISER_POOL_MB=128 "$repo/scripts/ps-up.sh" "${CONFS[1]}" || die "ps-up.sh of shard1 after kill -9"
}
step_shard_restart() {
  local dev grad sess tgtd pid t0 took
  dev=$(dev_of "$state/tcp.toml" 1 weights)
  grad=$(dev_of "$state/tcp.toml" 1 grad)
  sess=$(session_of "$dev")
  if [ -z "$sess" ] || [ ! -f "/sys/class/iscsi_session/$sess/recovery_tmo" ]; then
    die "$dev: no iSCSI session found in sysfs"
  fi
  # The state the restarted shard comes back with: a checkpoint now (fsync of the grad device), these weights.
  python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDWR); os.fsync(fd)" "$grad" || die "fsync $grad"
  dd if="$dev" of="$state/weights.before" bs=1M count=1 iflag=direct status=none || die "read $dev"
  echo 120 >"/sys/class/iscsi_session/$sess/recovery_tmo"
  tgtd=$(cat /run/blockps/shard1/pid)
  kill -9 "$tgtd"
  dd if="$dev" of="$state/weights.after" bs=1M count=1 iflag=direct status=none &
  pid=$!
  sleep 3
  kill -0 "$pid" 2>/dev/null || die "a read issued 3 s into the outage did not wait for the session (replacement_timeout 120 s)"
  restart_shard1
  t0=$SECONDS
  wait "$pid" || die "the read issued during the outage failed after the shard came back"
  echo "the read issued during the outage completed $((SECONDS - t0)) s after the restart"
  cmp "$state/weights.before" "$state/weights.after" || die "the restarted shard's weights are not those of its checkpoint"
  # A short replacement_timeout, and the shard stays away longer: EIO, not a hang.
  echo 5 >"/sys/class/iscsi_session/$sess/recovery_tmo"
  kill -9 "$(cat /run/blockps/shard1/pid)"
  t0=$SECONDS
  if timeout 60 dd if="$dev" of=/dev/null bs=1M count=1 iflag=direct status=none; then
    die "a read succeeded with the shard down"
  fi
  took=$((SECONDS - t0))
  [ "$took" -lt 60 ] || die "the read hung past the timeout instead of failing after replacement_timeout 5 s"
  echo "with replacement_timeout 5 s the read failed after ${took} s"
  restart_shard1
  t0=$SECONDS
  until dd if="$dev" of=/dev/null bs=1M count=1 iflag=direct status=none 2>/dev/null; do
    [ $((SECONDS - t0)) -lt 90 ] || die "$dev: no I/O 90 s after the shard came back (the session did not recover)"
    sleep 2
  done
  echo "the session recovered $((SECONDS - t0)) s after the restart"
  echo 120 >"/sys/class/iscsi_session/$sess/recovery_tmo"
}

# Hooks: programs of other parts run through tests/vm/guest/hooks/NAME.sh ISER_TOML TCP_TOML OUTDIR (the
# cluster files attach.sh wrote; the LR/momentum of the shards in LR and MU). Missing hook: SKIPPED, loudly.
run_hook() { # NAME WHAT
  local hook=$repo/tests/vm/guest/hooks/$1.sh
  [ -f "$hook" ] || skip "$2 is not in the tree yet (no tests/vm/guest/hooks/$1.sh)"
  mkdir -p "$state/$1"
  LR=$LR MU=$MU TOP=$top bash "$hook" "$state/iser.toml" "$state/tcp.toml" "$state/$1" || die "$1 hook failed"
}
step_sync_train_2workers() { run_hook sync-train-2workers "the 2-worker sync-mode training program (C/C++ API)"; }
step_numpy_worker() { run_hook numpy-worker "the plain file-I/O numpy worker (training issue)"; }
step_compressed_dev() { run_hook compressed-dev "compressed blocks through /dev (issue 50)"; }

step_detach() {
  "$repo/scripts/attach.sh" --transport iser --conf "${CONFS[0]}" --conf "${CONFS[1]}" --logout || die "logout iser"
  "$repo/scripts/attach.sh" --transport tcp --conf "${CONFS[0]}" --conf "${CONFS[1]}" --logout || die "logout tcp"
  udevadm settle -t 30
  if iscsiadm -m session 2>/dev/null | grep .; then die "sessions left after logout"; fi
  local left
  left=$(find /dev/disk/by-path/ -name '*iscsi*' 2>/dev/null)
  [ -z "$left" ] || die "iSCSI devices left after logout: $left"
  left=$(find /etc/iscsi/nodes/ -mindepth 1 2>/dev/null)
  [ -z "$left" ] || die "node records left after logout: $left"
}

step_ps_down() {
  "$repo/scripts/ps-down.sh" || die "ps-down.sh"
  if pgrep -a tgtd; then die "tgtd left running"; fi
  if ls /run/blockps/*/ 2>/dev/null; then die "shard state left in /run/blockps"; fi
  if rdma resource show cm_id | grep -i listen; then die "RDMA CM listeners left"; fi
  if ss -ltn | grep -E ":(3261|3262)\b"; then die "TCP listeners left"; fi
  # A shard writes a final checkpoint only when it holds updates; when an earlier failure skipped the steps
  # that push, a missing one would only repeat that failure.
  if grep -q $'\tSKIPPED\t0\tnot run: required step' "$res/steps.tsv"; then
    echo "final checkpoints not checked: the steps that push were skipped (see the failed step above)"
    return 0
  fi
  for s in 0 1; do
    [ -s /var/lib/blockps/shard$s/model.ckpt ] || die "shard$s: no final checkpoint"
  done
}

# --- driver --------------------------------------------------------------------------------------------------
if [ "${1:-}" = --one ]; then
  "step_${2//-/_}"
  exit 0
fi

# To the console (run.sh shows it live) and to a file that comes back with the results.
exec > >(tee -a "$res/console.log") 2>&1
# shellcheck source=tests/vm/guest/numpy-workload.sh
. "$share/payload/repo/tests/vm/guest/numpy-workload.sh"
# name, time limit (s), required (a failure makes the later steps pointless: they are skipped, cleanup runs).
# Each limit is at least 3x what the step took on a fresh machine (docs/OPTIONS.md, "Time limits in CI").
steps=(
  "rdma 60 1" "ps-up 120 1" "attach-iser 240 1" "attach-tcp 120 1"
  "posix-weights 90 0" "posix-grad 90 0" "client-posix-libaio 180 0" "client-libiscsi-iser 180 0"
  "fio 300 0" "job-fence 60 0" "fsync-checkpoint 60 0" "shard-restart 150 0" "sync-train-2workers 300 0" "compressed-dev 150 0" "numpy-worker $NUMPY_STEP_LIMIT_S 0"
  "detach 120 0" "ps-down 90 0"
)
say "guest test starts (kernel $(uname -r))"
# What the image was built from, so that a Debian update that changes behaviour shows up as such (run.sh prints it).
{
  echo "kernel $(uname -r)"
  dpkg-query -W -f '${Package} ${Version}\n' linux-image-amd64 open-iscsi rdma-core ibverbs-providers tgt \
    python3-numpy python3 fio 2>&1
} >"$res/versions.txt"
mkdir -p "$state" /run/lock/iscsi
/lib/systemd/systemd-udevd --daemon
udevadm trigger --action=add
udevadm settle -t 30
rm -rf "$top"
mkdir -p "$top"
cp -a "$share/payload/." "$top/" || echo "FAIL: cannot copy the payload"
: >"$res/steps.tsv"
overall=PASS
broken=''
for s in "${steps[@]}"; do
  read -r name limit required <<<"$s"
  if [ -n "$STEPS_FILTER" ] && ! grep -qw -- "$name" <<<"$STEPS_FILTER"; then continue; fi
  if [ -n "$broken" ] && [ "$name" != detach ] && [ "$name" != ps-down ]; then
    printf '%s\tSKIPPED\t0\tnot run: required step %s failed\n' "$name" "$broken" >>"$res/steps.tsv"
    continue
  fi
  say "step $name (limit ${limit}s)"
  t0=$SECONDS
  timeout -k 10 "$limit" bash "$0" --one "$name" >"$res/$name.log" 2>&1
  rc=$?
  took=$((SECONDS - t0))
  sed 's/^/    /' "$res/$name.log"
  case $rc in
    0) status=PASS reason='' ;;
    77) status=SKIPPED reason=$(grep -m1 '^SKIPPED:' "$res/$name.log" | cut -d' ' -f2-) ;;
    124 | 137) status=FAIL reason="timed out after ${limit}s" ;;
    *) status=FAIL reason=$(grep '^FAIL' "$res/$name.log" | tail -n 1) reason=${reason:-exit $rc} ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$took" "$reason" >>"$res/steps.tsv"
  say "step $name: $status (${took}s) $reason"
  if [ "$status" = FAIL ]; then
    overall=FAIL
    [ "$required" = 0 ] || broken=$name
  fi
done
for d in /run/blockps/*.last-tgtd.log /run/blockps/*/tgtd.log; do
  [ -f "$d" ] && cp "$d" "$res/tgtd-$(basename "$(dirname "$d")")-$(basename "$d")"
done
cp -r "$state" "$res/state" 2>/dev/null
dmesg >"$res/dmesg.log"
echo "$overall" >"$res/RESULT"
say "guest test done: $overall"
sync
sleep 1 # let tee drain
