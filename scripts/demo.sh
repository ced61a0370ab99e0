#!/usr/bin/env bash
# The main job: a local 2-shard blockps cluster (configs/shard0.conf and shard1.conf, one tgtd each) that a
# worker trains through: each step pulls the weights from both shards, computes a gradient, and pushes it (the
# shards run their optimizer on every push). It prints the loss and throughput per step, checkpoints, prints
# each shard's counters from its status LU, and stops the shards. Run as root; it does its own set-up.
#   scripts/demo.sh [--steps N] [--no-build]     (default 40 steps; --no-build: use BLOCKPS_BUILD_DIR as it is)
# Environment: BLOCKPS_BUILD_DIR (default ./build); BLOCKPS_PORT_OFFSET / BLOCKPS_CONTROL_OFFSET move the
# shards' ports (3261, 3262) and control numbers (1, 2) when those are taken; BLOCKPS_KEEP_DEMO=1 keeps the
# scratch directory (checkpoints, tgtd logs).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BLOCKPS_BUILD_DIR:-$repo/build}
steps=40
build_first=1
while [ $# -gt 0 ]; do
  case $1 in
    --steps)
      if [ $# -lt 2 ] || ! [[ $2 =~ ^[0-9]+$ ]] || [ "$2" -lt 1 ]; then
        echo "demo: --steps needs a whole number >= 1" >&2
        exit 2
      fi
      steps=$2
      shift 2
      ;;
    --no-build) build_first=; shift ;;
    -h | --help) sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument '$1' (--steps N, --no-build, --help)" >&2; exit 2 ;;
  esac
done

# shellcheck source=scripts/lib/build.sh
. "$repo/scripts/lib/build.sh"
blockps_prog=demo
# shellcheck source=scripts/lib/blockps-tgt.sh
. "$repo/scripts/lib/blockps-tgt.sh"

work=$(mktemp -d /tmp/blockps-demo-XXXXXX)
if [ -n "$build_first" ]; then
  echo "== set-up and build (log: $work/build.log)"
  if ! blockps_build "$repo" "$build" >"$work/build.log" 2>&1; then
    tail -30 "$work/build.log"
    die "set-up or build failed (whole log: $work/build.log)"
  fi
fi
[ -x "$build/client/blockps-pushpull-demo" ] || die "$build/client/blockps-pushpull-demo is not built"

# The example configs as they are, but with their checkpoints in the scratch directory: each demo run starts
# from the configured initial weights instead of the last run's checkpoint.
export BLOCKPS_STATE_DIR=$work/state
confs=()
for i in 0 1; do
  sed "s|/var/lib/blockps/|$work/checkpoints/|g" "$repo/configs/shard$i.conf" >"$work/shard$i.conf"
  confs+=("$work/shard$i.conf")
done
cleanup() {
  "$repo/scripts/ps-down.sh" "${confs[@]}" >/dev/null 2>&1 || warn "ps-down failed; see $work"
  if [ -n "${BLOCKPS_KEEP_DEMO:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

echo "== starting 2 shards"
"$repo/scripts/ps-up.sh" "${confs[@]}"

shard_args=()
for conf in "${confs[@]}"; do
  portal=$(conf_value "$conf" blockps-portal)
  host=${portal%:*}
  port=$((${portal##*:} + BLOCKPS_PORT_OFFSET))
  iqn=$(sed -n 's/^[[:space:]]*<target[[:space:]]\{1,\}\([^>[:space:]]*\)>.*/\1/p' "$conf" | head -1)
  shard_args+=(--shard "iscsi://$host:$port/$iqn")
done

echo "== training through the PS"
"$build/client/blockps-pushpull-demo" "${shard_args[@]}" --steps "$steps"
