#!/bin/bash
# tests/vm hook: client/examples/numpy_direct_worker.py, a Fashion-MNIST worker with no blockps code (os.open
# O_DIRECT, os.pwrite of gradients, os.preadv of weights), trains through the /dev/sdX devices open-iscsi gives
# over iSER. Shards: VM-only configs (configs/vm-numpy*.conf: 2 x 512 KiB, 128 KiB blocks, Adam lr 0.001, as the
# worker's author specifies), started beside the example ones. Data: Fashion-MNIST from the payload (run.sh copies
# the host's /usr/share/datasets/fashion-mnist). Passes when the worker exits 0: its final test accuracy, on
# weights pulled from the PS, reached the bound.
#   hooks/numpy-worker.sh ISER_TOML TCP_TOML OUTDIR     (main.sh runs it; the TOMLs are not used)
# The workload and its bound: tests/vm/guest/numpy-workload.sh (NUMPY_WORKLOAD=ci, a fixed 150 steps with the bound
# 80% that the same workload reaches on the host, or full: 2 epochs, bound 85%).
# Where a run stands, in the step's log: the worker's own lines (a line every 10 steps with seconds per step; after
# 30 s without a finished step, the I/O or compute it is in and its Python stack), a line every 20 s from this
# hook (load, MemAvailable, major faults, the devices' completed reads/writes), and when the worker reaches its
# limit, before it is killed: its threads as the kernel sees them (state, wchan, syscall, kernel stack), the
# devices' in-flight commands, the sessions (sysfs, iscsiadm -P 3), both targets (tgtadm show), sysrq-w's blocked
# tasks with the last of dmesg, the tgtd logs, then SIGABRT for every Python thread's stack (faulthandler).
set -uo pipefail
out=$3
# shellcheck source=tests/vm/guest/hooks/shards.sh
. "$(dirname "${BASH_SOURCE[0]}")/shards.sh"
worker=$repo/client/examples/numpy_direct_worker.py
data=$TOP/data/fashion-mnist
[ -f "$worker" ] || die "no $worker in the payload"
[ -f "$data/train-images-idx3-ubyte.gz" ] ||
  skip "no Fashion-MNIST in the payload: the host running tests/vm/run.sh lacks /usr/share/datasets/fashion-mnist (apt-get install dataset-fashion-mnist)"
# shellcheck source=tests/vm/guest/numpy-workload.sh
. "$repo/tests/vm/guest/numpy-workload.sh" || die "bad NUMPY_WORKLOAD"
# numpy's AVX2/FMA3 kernels died of SIGSEGV under QEMU 7.2's TCG with `-cpu max` (NPY_DISABLE_CPU_FEATURES kept
# them off here); the guest's CPU model (tests/vm/run.sh, --guest-cpu) now has no AVX at all, so numpy and OpenBLAS
# pick SSE4.2 kernels by themselves.

shards_up "$repo/tests/vm/guest/configs/vm-numpy0.conf" "$repo/tests/vm/guest/configs/vm-numpy1.conf"
shards_attach iser "$out/iser.toml"
shard_args=()
for s in 0 1; do
  shard_args+=(--shard "$(dev_of "$out/iser.toml" $s grad),$(dev_of "$out/iser.toml" $s weights)")
done
say "numpy_direct_worker.py ${shard_args[*]} ${NUMPY_ARGS[*]} --min-accuracy $NUMPY_MIN_ACCURACY (workload ${NUMPY_WORKLOAD:-ci})"
say "time limit ${NUMPY_LIMIT_S} s (tests/vm/guest/numpy-workload.sh: $NUMPY_LIMIT_BASIS); the worker projects its run every 10 steps and stops early past it"
devs=()
for s in 0 1; do for k in grad weights; do devs+=("$(dev_of "$out/iser.toml" $s $k)"); done; done
echo "devices: $(for d in "${devs[@]}"; do printf '%s max_sectors_kb=%s ' "$d" "$(cat "/sys/block/${d#/dev/}/queue/max_sectors_kb")"; done)"

# Where the worker and the path below it stand: the worker's threads as the kernel sees them (state, wchan, the
# system call and its arguments, the kernel stack), the devices' in-flight commands, the sessions, both targets'
# view (tgtadm), the kernel's blocked tasks and its last messages. Printed when the worker runs out of time.
where_is() { # PID
  local t d c
  echo "--- the worker (pid $1) after $((SECONDS - started)) s: where it is ---"
  for t in /proc/"$1"/task/*; do
    echo "thread ${t##*/} ($(cat "$t/comm" 2>/dev/null)): state $(awk '{ print $3 }' "$t/stat" 2>/dev/null)" \
      "wchan $(cat "$t/wchan" 2>/dev/null) syscall $(cat "$t/syscall" 2>/dev/null)"
    sed 's/^/    /' "$t/stack" 2>/dev/null
  done
  for d in "${devs[@]}"; do
    echo "$d: inflight (reads writes) $(cat "/sys/block/${d#/dev/}/inflight")," \
      "state $(cat "/sys/block/${d#/dev/}/device/state"), stat $(cat "/sys/block/${d#/dev/}/stat")"
  done
  grep -H . /sys/class/iscsi_session/*/state /sys/class/iscsi_session/*/recovery_tmo 2>/dev/null
  iscsiadm -m session -P 3 2>&1 | grep -E 'Target:|Current Portal|iSCSI Session State|Internal iscsid|Attached scsi|State:' || true
  for c in 13 14; do
    echo "tgtadm -C $c --op show --mode target:"
    timeout 10 tgtadm -C $c --op show --mode target 2>&1 | grep -vE '^\s*(Backing store (flags|path)|Readonly|SWP|Thin|Online|Removable|Prevent|Size|SCSI|Type|Backing store type)' | sed 's/^/    /'
  done
  grep -E 'MemAvailable|MemFree|^Cached' /proc/meminfo
  cat /proc/loadavg
  echo w >/proc/sysrq-trigger 2>/dev/null
  echo "dmesg (last 60 lines, after sysrq-w: blocked tasks):"
  dmesg | tail -n 60
  for c in /run/blockps/vm-numpy*/tgtd.log; do echo "$c (last 20 lines):"; tail -n 20 "$c"; done
}

# A line every 20 s while the worker runs (load, free memory, major faults, the devices' completed reads/writes):
# a slow run and a stuck one look different here, in the step's log. And the limit, with a report before the kill.
rc=0
started=$SECONDS
BLOCKPS_FASHION_MNIST_DIR=$data python3 -X faulthandler "$worker" "${shard_args[@]}" \
  --model-bytes 1M --block-bytes 128K "${NUMPY_ARGS[@]}" --init --min-accuracy "$NUMPY_MIN_ACCURACY" \
  --log-every 10 --stall-report 30 --time-limit "$NUMPY_LIMIT_S" &
pid=$!
next=20
while kill -0 "$pid" 2>/dev/null; do
  if [ $((SECONDS - started)) -ge "$NUMPY_LIMIT_S" ]; then
    where_is "$pid"
    kill -ABRT "$pid" 2>/dev/null # -X faulthandler: every Python thread's stack, even with the GIL held
    sleep 3
    kill -9 "$pid" 2>/dev/null
    rc=124
    break
  fi
  if [ $((SECONDS - started)) -ge "$next" ]; then
    io=''
    for d in "${devs[@]}"; do io+=" ${d#/dev/} $(awk '{ print $1 "r/" $5 "w" }' "/sys/block/${d#/dev/}/stat")"; done
    echo "  [worker +$((SECONDS - started)) s] load $(cut -d' ' -f1-3 /proc/loadavg), MemAvailable" \
      "$(awk '/MemAvailable/ { print int($2 / 1024) " MiB" }' /proc/meminfo), majflt" \
      "$(awk '/pgmajfault/ { print $2 }' /proc/vmstat), completed:$io"
    next=$((next + 20))
  fi
  sleep 1
done
[ "$rc" = 124 ] || wait "$pid" || rc=$?
echo "numpy_direct_worker.py: exit $rc after $((SECONDS - started)) s"
case $rc in
  0) ;;
  1) die "numpy_direct_worker.py: final test accuracy below $NUMPY_MIN_ACCURACY" ;;
  3) die "numpy_direct_worker.py: this guest runs too slowly for the step's limit of $NUMPY_LIMIT_S s (its s/step above; tests/vm/guest/numpy-workload.sh)" ;;
  124) die "numpy_direct_worker.py did not finish within $NUMPY_LIMIT_S s" ;;
  *) die "numpy_direct_worker.py failed (exit $rc)" ;;
esac
"$TOP/build/client/cli/blockps" -c "$out/iser.toml" status || die "blockps status"
