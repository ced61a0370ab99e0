#!/usr/bin/env bash
# Runs every test of blockps on this machine, doing its own set-up first (run as root):
#   scripts/test.sh [extra ctest arguments, e.g. -L unit or -R Checkpoint]
# Steps: scripts/setup.sh (packages, tgt source), a build with warnings as errors, `cmake --install` (puts
# bs_blockps.so where tgtd loads it), then ctest: unit tests and integration tests (each starts its own tgtd).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BLOCKPS_BUILD_DIR:-$repo/build}
jobs=$(nproc)

bash "$repo/scripts/setup.sh" "$build"
cmake -S "$repo" -B "$build" -DBLOCKPS_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j"$jobs"
cmake --install "$build"
ctest --test-dir "$build" --output-on-failure --timeout 900 "$@"
