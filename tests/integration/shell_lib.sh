# shellcheck shell=bash
# Shared by the shell integration tests: their arguments (--repo REPO, --lu-io PATH-TO-blockps_lu_io) and the
# step/fail/skip protocol ctest reads (exit 1 = fail, exit 77 = skipped, said loudly). Source it, then call
# parse_test_args "$@".
# shellcheck disable=SC2034 # read by the scripts that source this file
repo=''
# shellcheck disable=SC2034
lu_io=''
# shellcheck disable=SC2034 # repo and lu_io are read by the scripts that source this file
parse_test_args() {
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --repo) repo=$2; shift 2 ;;
      --lu-io) lu_io=$2; shift 2 ;;
      *) echo "usage: $0 --repo REPO [--lu-io BLOCKPS_LU_IO]" >&2; exit 2 ;;
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
# On failure: the tail of every tgtd log of the shards recorded under $BLOCKPS_STATE_DIR (the reason is there).
dump_shard_logs() {
  local log
  for log in "$BLOCKPS_STATE_DIR"/*.log "$BLOCKPS_STATE_DIR"/*/tgtd.log; do
    [ -f "$log" ] || continue
    echo "---- $log" >&2
    tail -n 30 "$log" >&2
  done
}
