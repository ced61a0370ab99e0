#!/usr/bin/env bash
# Runs every test of blockps on this machine, doing its own set-up first (run as root):
#   scripts/test.sh [extra ctest arguments, e.g. -L unit or -R Checkpoint]   (ctest --help lists them)
#   scripts/test.sh -h | --help     this text (nothing is installed or built)
# Steps: scripts/setup.sh (packages, tgt source), a build with warnings as errors, the module installed where
# tgtd loads it, then ctest: unit tests and integration tests (each starts its own tgtd on its own port).
# Each phase prints its duration ("phase: NAME took Ns"; scripts/lib/phases.sh).
# Environment: BLOCKPS_BUILD_DIR (default ./build); BLOCKPS_PHASE_LOG (a file: each phase is appended to it).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
blockps_prog="test"
# shellcheck source=scripts/lib/messages.sh
. "$repo/scripts/lib/messages.sh"
case ${1:-} in
  -h | --help) usage 0 ;;  # ctest's own options: ctest --help
esac
build=${BLOCKPS_BUILD_DIR:-$repo/build}
# shellcheck source=scripts/lib/build.sh
. "$repo/scripts/lib/build.sh"

blockps_build "$repo" "$build" -DBLOCKPS_WERROR=ON
run_phase ctest ctest --test-dir "$build" --output-on-failure --timeout 900 -j"$(nproc)" "$@"
