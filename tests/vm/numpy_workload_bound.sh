#!/usr/bin/env bash
# The VM's numpy-worker step checks its accuracy against a bound that the same workload reaches on the host
# (tests/vm/guest/numpy-workload.sh). This test keeps that claim true: it trains the step's workload without
# devices (numpy_direct_worker.py --self-check: the same MLP, data order and Adam, in the process) and fails
# when it does not reach the bound, so a change of the worker or the workload shows here, not in a slow VM run.
# It also checks that the worker's --time-limit stops a run that cannot fit.
#   tests/vm/numpy_workload_bound.sh [ci|full]      (ctest runs ci)
# Exit 0: the bound is reached; 1: it is not; 77: numpy or Fashion-MNIST missing (SKIPPED, loudly).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export NUMPY_WORKLOAD=${1:-ci}
# shellcheck source=tests/vm/guest/numpy-workload.sh
. "$repo/tests/vm/guest/numpy-workload.sh"
python=/usr/bin/python3  # Debian's numpy is installed for the system interpreter
data=${BLOCKPS_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if ! "$python" -c 'import numpy' 2>/dev/null || [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
  echo "TEST SKIPPED: needs $python with numpy and $data (apt-get install python3-numpy dataset-fashion-mnist)"
  exit 77
fi
# The worker's --time-limit (the VM step passes NUMPY_LIMIT_S): a run that cannot fit stops at its first progress
# line with exit 3 and its speed, instead of being killed at the limit.
rc=0
out=$("$python" "$repo/client/examples/numpy_direct_worker.py" --self-check --steps 50 --log-every 10 \
  --time-limit 0.001 --min-accuracy 0 2>&1) || rc=$?
if [ "$rc" != 3 ] || ! grep -q 'too slow for --time-limit 0.001 s' <<<"$out" || grep -q '^step 20 ' <<<"$out"; then
  echo "FAIL: --time-limit 0.001 should stop the worker at step 10 with exit 3 (exit $rc):"
  echo "$out"
  exit 1
fi
echo "--time-limit: a run that cannot fit stops at step 10 with exit 3"
echo "workload $NUMPY_WORKLOAD: ${NUMPY_ARGS[*]}, bound $NUMPY_MIN_ACCURACY"
"$python" "$repo/client/examples/numpy_direct_worker.py" --self-check "${NUMPY_ARGS[@]}" \
  --min-accuracy "$NUMPY_MIN_ACCURACY"
