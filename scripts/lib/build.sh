# shellcheck shell=bash
# The one build recipe of scripts/test.sh and scripts/demo.sh. Source it, then:
#   blockps_build REPO BUILD_DIR [CMAKE_ARGS...]
# It runs scripts/setup.sh (packages, tgt's source), configures (Release, plus CMAKE_ARGS: test.sh adds
# -DBLOCKPS_WERROR=ON, as CI builds; the demo builds with the user's defaults, warnings not errors, or with
# what an earlier configure of BUILD_DIR chose) and builds, and installs the tgt module where tgtd loads it (component tgt_module; nothing else is installed). Each part is a timed
# phase (scripts/lib/phases.sh); the first that fails ends it with its status, also where the caller has no
# `set -e` in force (`if ! blockps_build ...`).
# Release (-O3, as a package builds it): the tests run on the code users deploy, and CI's check that no -O3 warning
# stops a user's Release build is this build, not a second compile of the product (issue 53).
# shellcheck source=scripts/lib/phases.sh
. "$(dirname "${BASH_SOURCE[0]}")/phases.sh"
blockps_build() {
  local repo=$1 build=$2
  shift 2
  run_phase setup bash "$repo/scripts/setup.sh" "$build" &&
    run_phase configure cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" &&
    run_phase build cmake --build "$build" -j"$(nproc)" &&
    run_phase install-module cmake --install "$build" --component tgt_module
}
