# shellcheck shell=bash
# Sourced by the hooks: start VM-only shards (tests/vm/guest/configs/) beside the example ones, attach them with
# open-iscsi, and take everything down again on exit, so that the later detach/ps-down steps see only their own.
# Needs TOP (main.sh sets it; BLOCKPS_PORTAL_ADDR, BLOCKPS_BACKING_STORE_DIR, LD_LIBRARY_PATH are exported there).
repo=$TOP/repo
hook_confs=()
hook_transports=()
# shellcheck source=tests/vm/guest/common.sh
. "$repo/tests/vm/guest/common.sh"

hook_cleanup() {
  local t args=() c
  for c in "${hook_confs[@]}"; do args+=(--conf "$c"); done
  for t in "${hook_transports[@]}"; do
    timeout 60 "$repo/scripts/attach.sh" --transport "$t" "${args[@]}" --logout || echo "WARNING: logout ($t) failed"
  done
  [ "${#hook_confs[@]}" = 0 ] || timeout 60 "$repo/scripts/ps-down.sh" "${hook_confs[@]}" ||
    echo "WARNING: ps-down.sh ${hook_confs[*]} failed"
}
trap hook_cleanup EXIT

shards_up() { # CONF...
  hook_confs=("$@")
  say "ps-up ${*##*/}"
  BLOCKPS_ISER=yes BLOCKPS_ISER_POOL_MB=128 timeout 120 "$repo/scripts/ps-up.sh" "$@" || die "ps-up.sh $*"
}

shards_attach() { # TRANSPORT OUT
  local args=() c
  for c in "${hook_confs[@]}"; do args+=(--conf "$c"); done
  hook_transports+=("$1")
  say "attach --transport $1"
  timeout 150 "$repo/scripts/attach.sh" --transport "$1" "${args[@]}" --out "$2" --timeout 90 || die "attach.sh --transport $1"
  udevadm settle -t 30
  cat "$2"
}
