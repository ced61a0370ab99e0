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
# numpy's AVX2/FMA3 kernels die of SIGSEGV under QEMU 7.2's TCG (seen in the VM without any device I/O: the
# worker's MLP gradient on in-memory arrays crashed in `x @ w1 + b1` / np.maximum with AVX2 dispatch on, ran
# with it off). An emulator fault, not the worker's: keep numpy on its SSE/AVX kernels here.
export NPY_DISABLE_CPU_FEATURES="AVX2 FMA3"

shards_up "$repo/tests/vm/guest/configs/vm-numpy0.conf" "$repo/tests/vm/guest/configs/vm-numpy1.conf"
shards_attach iser "$out/iser.toml"
shard_args=()
for s in 0 1; do
  shard_args+=(--shard "$(dev_of "$out/iser.toml" $s grad),$(dev_of "$out/iser.toml" $s weights)")
done
say "numpy_direct_worker.py ${shard_args[*]} ${NUMPY_ARGS[*]} --min-accuracy $NUMPY_MIN_ACCURACY (workload ${NUMPY_WORKLOAD:-ci})"
rc=0
BLOCKPS_FASHION_MNIST_DIR=$data timeout "$NUMPY_LIMIT_S" python3 -X faulthandler "$worker" "${shard_args[@]}" \
  --model-bytes 1M --block-bytes 128K "${NUMPY_ARGS[@]}" --init --min-accuracy "$NUMPY_MIN_ACCURACY" \
  --log-every 10 --stall-report 30 || rc=$?
case $rc in
  0) ;;
  1) die "numpy_direct_worker.py: final test accuracy below $NUMPY_MIN_ACCURACY" ;;
  124) die "numpy_direct_worker.py did not finish within $NUMPY_LIMIT_S s" ;;
  *) die "numpy_direct_worker.py failed (exit $rc)" ;;
esac
"$TOP/build/client/cli/blockps" -c "$out/iser.toml" status || die "blockps status"
