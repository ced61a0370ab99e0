#!/usr/bin/env bash
# The options of the CI scripts that choose what CI builds and runs refuse a wrong value before anything is built,
# fuzzed or booted, with the value and what is allowed: tests/fuzz/run.sh --jobs, tests/build_configurations.sh
# --release-build (a build that is not Release with warnings as errors, or beside --types Release) and
# tests/vm/run.sh --guest-cpu (a model QEMU does not list). Each runs against a scratch tgt "source" (an empty
# usr/tgtd.h) and scratch CMake caches, so nothing real is needed but, for --guest-cpu, root and QEMU.
#   test_ci_script_options.sh --repo REPO
set -euo pipefail
# shellcheck source=tests/integration/shell_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_lib.sh"
parse_test_args "$@"
[ -n "$repo" ] || fail "--repo REPO is required"
scratch=$(mktemp -d /tmp/blockps-ci-options-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/tgt/usr" "$scratch/notrelease" "$scratch/release"
touch "$scratch/tgt/usr/tgtd.h"
printf 'CMAKE_BUILD_TYPE:STRING=RelWithDebInfo\nBLOCKPS_WERROR:BOOL=ON\n' >"$scratch/notrelease/CMakeCache.txt"
printf 'CMAKE_BUILD_TYPE:STRING=Release\nBLOCKPS_WERROR:BOOL=ON\n' >"$scratch/release/CMakeCache.txt"

refused() { # STATUS TEXT COMMAND...: COMMAND exits STATUS and prints TEXT
  local want=$1 text=$2 out status=0
  shift 2
  out=$("$@" 2>&1) || status=$?
  [ "$status" = "$want" ] || fail "$* exited $status, not $want: $out"
  grep -qF -- "$text" <<<"$out" || fail "$* did not say '$text': $out"
}

step "tests/fuzz/run.sh --jobs: a whole number in 1..64"
for bad in 0 65 two -1; do
  refused 2 "--jobs '$bad': must be a whole number in 1..64" \
    bash "$repo/tests/fuzz/run.sh" --tgt-source "$scratch/tgt" --jobs "$bad" --work "$scratch/fuzz"
done
[ ! -e "$scratch/fuzz" ] || fail "tests/fuzz/run.sh made its work directory before refusing --jobs"

step "tests/build_configurations.sh --release-build: a Release build with BLOCKPS_WERROR=ON, not beside --types Release"
refused 1 "--release-build '$scratch/notrelease' is not a Release build with BLOCKPS_WERROR=ON (its CMakeCache.txt says CMAKE_BUILD_TYPE='RelWithDebInfo', BLOCKPS_WERROR='ON')" \
  bash "$repo/tests/build_configurations.sh" --tgt-source "$scratch/tgt" --types Debug \
  --release-build "$scratch/notrelease" --work "$scratch/configs"
refused 1 "is not a Release build with BLOCKPS_WERROR=ON (its CMakeCache.txt says CMAKE_BUILD_TYPE='', BLOCKPS_WERROR='')" \
  bash "$repo/tests/build_configurations.sh" --tgt-source "$scratch/tgt" --types Debug \
  --release-build "$scratch/none" --work "$scratch/configs"
refused 1 "--types names Release and --release-build gives one: choose one" \
  bash "$repo/tests/build_configurations.sh" --tgt-source "$scratch/tgt" --release-build "$scratch/release" \
  --work "$scratch/configs"
[ ! -e "$scratch/configs" ] || fail "tests/build_configurations.sh made its work directory before refusing"

step "tests/vm/run.sh --guest-cpu: a model QEMU lists"
if [ "$(id -u)" != 0 ] || ! PATH=$PATH:/usr/sbin:/sbin command -v qemu-system-x86_64 >/dev/null ||
  ! PATH=$PATH:/usr/sbin:/sbin command -v debootstrap >/dev/null; then
  skip "tests/vm/run.sh needs root, QEMU and debootstrap before it reads --guest-cpu (scripts/setup.sh installs them)"
fi
refused 1 "--guest-cpu 'NoSuchCpu' is not one of QEMU's CPU models" \
  bash "$repo/tests/vm/run.sh" --guest-cpu NoSuchCpu --build-dir "$scratch/none" --cache-dir "$scratch/vmcache"
[ ! -e "$scratch/vmcache" ] || fail "tests/vm/run.sh touched its image cache before refusing --guest-cpu"

echo "PASS: --jobs, --release-build and --guest-cpu refuse wrong values before anything is built or booted"
