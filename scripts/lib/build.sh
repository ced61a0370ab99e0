# shellcheck shell=bash
# The one build recipe of scripts/test.sh and scripts/demo.sh. Source it, then: blockps_build REPO BUILD_DIR
# It runs scripts/setup.sh (packages, tgt's source), configures and builds with warnings as errors, and installs
# the tgt module where tgtd loads it (component tgt_module; nothing else is installed).
blockps_build() {
  local repo=$1 build=$2
  bash "$repo/scripts/setup.sh" "$build"
  cmake -S "$repo" -B "$build" -DBLOCKPS_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  cmake --build "$build" -j"$(nproc)"
  cmake --install "$build" --component tgt_module
}
