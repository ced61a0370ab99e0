# shellcheck shell=bash
# Shared by the shell integration tests: their arguments (--repo REPO, --lu-io PATH-TO-blockps_lu_io) and the
# step/fail/skip protocol ctest reads (exit 1 = fail, exit 77 = skipped, said loudly). Source it, then call
# parse_test_args "$@".
# shellcheck disable=SC2034 # read by the scripts that source this file
repo=''
# shellcheck disable=SC2034
lu_io=''
# shellcheck disable=SC2034
other_tgt_module=''
# shellcheck disable=SC2034 # repo and lu_io are read by the scripts that source this file
parse_test_args() {
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --repo) repo=$2; shift 2 ;;
      --lu-io) lu_io=$2; shift 2 ;;
      --other-tgt-module) other_tgt_module=$2; shift 2 ;;
      *) echo "usage: $0 --repo REPO [--lu-io BLOCKPS_LU_IO] [--other-tgt-module DIR]" >&2; exit 2 ;;
    esac
  done
}
step() { echo "--- $*"; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
skip() {
  echo "INTEGRATION TEST SKIPPED: $*"
  exit 77
}
# Skips (exit 77, loudly) unless this runs as root with tgt's tools installed; puts /usr/sbin and /sbin on PATH.
require_root_and_tgt() {
  local tool
  [ "$(id -u)" = 0 ] || skip "tgtd needs root and this is uid $(id -u)"
  for tool in tgtd tgtadm tgt-admin; do
    PATH=$PATH:/usr/sbin:/sbin command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/setup.sh)"
  done
  export PATH=$PATH:/usr/sbin:/sbin
}
# On failure: the tail of every tgtd log of the shards recorded under $BLOCKPS_STATE_DIR (the reason is there).
dump_shard_logs() {
  local log
  for log in "$BLOCKPS_STATE_DIR"/*.log "$BLOCKPS_STATE_DIR"/*/tgtd.log; do
    [ -f "$log" ] || continue
    echo "---- $log" >&2
    tail -n 30 "$log" >&2
  done
}
# Example configs (configs/NAME.conf) copied into DIR with only their checkpoint directory moved from
# /var/lib/blockps/ into DIR/lib/ (a test must not touch the host's shards); fails when a copy differs in
# anything else. Appends the copies to the array `confs`.
example_confs_into() { # DIR NAME...
  local dir=$1 name copy
  shift
  for name in "$@"; do
    copy=$dir/$name.conf
    sed "s#/var/lib/blockps/#$dir/lib/#g" "$repo/configs/$name.conf" >"$copy"
    sed "s#$dir/lib/#/var/lib/blockps/#g" "$copy" | cmp -s - "$repo/configs/$name.conf" ||
      fail "copy of configs/$name.conf differs in more than the checkpoint directory"
    grep -q "$dir/lib/$name/" "$copy" || fail "configs/$name.conf does not keep checkpoints in /var/lib/blockps/$name/"
    confs+=("$copy")
  done
}
# The cluster file FILE for the example shards (configs/shard0.conf, shard1.conf) started by ps-up.sh with
# BLOCKPS_PORT_OFFSET: their 32M model in 256K blocks, LUNs 1 grad, 2 weights, 3 status; INITIATOR, when given,
# becomes [client] initiator.
example_cluster_file() { # FILE [INITIATOR]
  local s url
  {
    printf '[model]\nsize = "32M"\ndtype = "f32"\nblock = "256K"\n'
    [ -z "${2:-}" ] || printf '[client]\ninitiator = "%s"\n' "$2"
    for s in 0 1; do
      url="iscsi://127.0.0.1:$((3261 + s + ${BLOCKPS_PORT_OFFSET:-0}))/iqn.2026-11.io.blockps:shard$s"
      printf '[[shard]]\nname = "shard%s"\ngrad = "%s/1"\nweights = "%s/2"\nstatus = "%s/3"\n' "$s" "$url" "$url" "$url"
    done
  } >"$1"
}
# The end of a test's EXIT trap, after its own clean-up: shard logs on failure, the scratch directory TMP
# removed (kept with BLOCKPS_KEEP_TMP set), and the test's exit status RC kept.
finish_test() { # RC TMP
  [ "$1" -eq 0 ] || [ "$1" -eq 77 ] || dump_shard_logs
  if [ -n "${BLOCKPS_KEEP_TMP:-}" ]; then echo "kept $2"; else rm -rf "$2"; fi
  exit "$1"
}
