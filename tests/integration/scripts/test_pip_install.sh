#!/usr/bin/env bash
# The Python package installs the usual way and works installed: `pip install --no-build-isolation --no-index
# client/python` into a fresh virtual environment (--system-site-packages: Debian's numpy and torch), offline,
# with Debian's setuptools and wheel; then, with no PYTHONPATH, the venv's interpreter imports blockps from the
# venv's site-packages (not the build tree) and trains 3 steps of a torch model through the example shards
# (configs/shard0.conf, shard1.conf: SGD with momentum on the shards) with blockps.torch.DistributedOptimizer; the
# weights must be those plain torch.optim.SGD gives for the same gradients.
#   test_pip_install.sh --repo REPO
# Exit 0: pass; 77: skipped (not root, tgt missing, no python3-venv/pip: said); anything else: fail.
set -euo pipefail

# shellcheck source=tests/integration/shell_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_lib.sh"
parse_test_args "$@"
require_root_and_tgt
py=/usr/bin/python3
missing_tool() { # WHAT: a failure in CI (scripts/setup.sh installs it), a loud skip elsewhere
  [ "${CI:-}" != true ] || fail "$1 (scripts/setup.sh installs it)"
  skip "$1 (scripts/setup.sh installs it)"
}
"$py" -c 'import venv, ensurepip' 2>/dev/null || missing_tool "$py has no venv/ensurepip (python3-venv)"
"$py" -m pip --version >/dev/null 2>&1 || missing_tool "$py has no pip (python3-pip)"
"$py" -c 'import setuptools, wheel' 2>/dev/null || missing_tool "$py has no setuptools and wheel (python3-setuptools, python3-wheel)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/blockps-pip-XXXXXX")
export BLOCKPS_STATE_DIR=$tmp/run
# Controls 31951-31952 and portals 40261-40262: clear of the other script tests (demo 43261, exporter 41261,
# systemd 42261 ...) and of TgtdInstance's ranges.
export BLOCKPS_CONTROL_OFFSET=31950 BLOCKPS_PORT_OFFSET=37000
cleanup() {
  local rc=$?
  "$repo/scripts/ps-down.sh" >/dev/null 2>&1 || true
  finish_test "$rc" "$tmp"
}
trap cleanup EXIT

step "pip install --no-build-isolation --no-index client/python into a new venv"
"$py" -m venv --system-site-packages "$tmp/venv" || fail "could not make a virtual environment"
tree_before=$(cd "$repo/client/python" && find . -path ./__pycache__ -prune -o -print | sort)
# pip builds in a copy of nothing: the package directory itself (in-tree), so setup.py finds the repository.
if ! (cd "$tmp" && "$tmp/venv/bin/python" -m pip install --no-build-isolation --no-index "$repo/client/python") \
  >"$tmp/pip.log" 2>&1; then
  tail -40 "$tmp/pip.log" >&2
  fail "pip install failed (log above)"
fi
grep -E "Successfully installed blockps-[0-9.]+" "$tmp/pip.log" || fail "pip did not say it installed blockps"
tree_after=$(cd "$repo/client/python" && find . -path ./__pycache__ -prune -o -print | sort)
[ "$tree_before" = "$tree_after" ] ||
  fail "pip install left files in the source tree: $(diff <(echo "$tree_before") <(echo "$tree_after") | grep '^>' | head -5)"

step "the installed package is the one imported (no PYTHONPATH)"
where=$(cd "$tmp" && env -u PYTHONPATH "$tmp/venv/bin/python" -c 'import blockps, blockps.torch, blockps._shard_checkpoint; print(blockps.__file__)') ||
  fail "the installed package does not import"
case $where in "$tmp/venv/"*site-packages/blockps/__init__.py) echo "imported from $where" ;;
  *) fail "blockps was imported from $where, not from the venv's site-packages" ;;
esac

step "3 steps through the example shards with the installed package"
confs=()
example_confs_into "$tmp" shard0 shard1
"$repo/scripts/ps-up.sh" "${confs[@]}" || fail "ps-up could not start the example shards"
cluster=$tmp/cluster.toml
example_cluster_file "$cluster"
(cd "$tmp" && env -u PYTHONPATH "$tmp/venv/bin/python" - "$cluster") <<'PY' || fail "training through the installed package failed"
import copy, sys
import torch
import blockps.torch

torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
reference = copy.deepcopy(model)
# configs/shard*.conf: opt=momentum;lr=0.05;momentum=0.9
optimizer = blockps.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                               model, cluster=sys.argv[1])
local = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
for step in range(3):
    x, y = torch.randn(8, 32), torch.randint(0, 4, (8,))
    for net, opt in ((model, optimizer), (reference, local)):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
for (name, p), q in zip(model.named_parameters(), reference.parameters()):
    if not torch.allclose(p, q, rtol=1e-5, atol=1e-6):
        sys.exit(f"{name}: the shards' weights differ from torch.optim.SGD's by {(p - q).abs().max().item()}")
print("3 steps through the installed package match torch.optim.SGD")
PY
echo "pip install test passed"
