#!/usr/bin/env bash
# The client component as users get it: installs it with `cmake --install BUILD --prefix TMP --component client`,
# checks the files (the C API header and no other, library and its SONAME, pkg-config file, CMake package) and
# that the library exports only blockps_* symbols, then builds and runs consumer/ two ways: a CMake project with
# find_package(blockps), and gcc with `pkg-config --cflags --libs blockps`. Exit 77 (skip) without pkg-config.
#   test_package.sh --build BUILD_DIR --consumer CONSUMER_DIR --work WORK_DIR
set -euo pipefail

build='' consumer='' work=''
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --consumer) consumer=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "test_package.sh: unknown argument '$1' (--build, --consumer, --work)" >&2; exit 2 ;;
  esac
done
[[ -n $build && -n $consumer && -n $work ]] || { echo "test_package.sh: --build, --consumer and --work are required" >&2; exit 2; }
command -v pkg-config >/dev/null || { echo "TEST SKIPPED: pkg-config is not installed"; exit 77; }

fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" --component client >"$work/install.log" || { cat "$work/install.log"; fail "install"; }
cat "$work/install.log"

libdir=$(dirname "$(find "$prefix" -name 'libblockps.so' -print -quit)")
[[ $libdir != . ]] || fail "no libblockps.so under $prefix"
for f in "$prefix/include/blockps/blockps.h" "$libdir/libblockps.so.0" "$libdir/pkgconfig/blockps.pc" \
         "$libdir/cmake/blockps/blockpsConfig.cmake" "$libdir/cmake/blockps/blockpsConfigVersion.cmake" \
         "$libdir/cmake/blockps/blockpsTargets.cmake"; do
  [[ -e $f ]] || fail "$f was not installed"
done
# The public face is the C API alone: no private or C++ header installed (client/CMakeLists.txt says why).
headers=$(cd "$prefix/include" && find . -type f -o -type l | sort | tr '\n' ' ')
[[ $headers == './blockps/blockps.h ' ]] || fail "installed headers are '$headers', want only ./blockps/blockps.h"
soname=$(objdump -p "$libdir/libblockps.so" | awk '$1 == "SONAME" {print $2}')
[[ $soname == libblockps.so.0 ]] || fail "SONAME is '$soname', want libblockps.so.0"
others=$(nm -D --defined-only "$libdir/libblockps.so" | awk '$2 ~ /^[TDBRVW]$/ && $3 !~ /^blockps_/ {print $3}')
[[ -z $others ]] || fail "libblockps.so exports symbols outside the C API: $(echo "$others" | head -5)"
echo "installed: $(cd "$prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"

# 1. CMake: find_package(blockps) with the prefix on CMAKE_PREFIX_PATH.
cmake -S "$consumer" -B "$work/cmake-consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" \
  >"$work/cmake-consumer.log" 2>&1 || { cat "$work/cmake-consumer.log"; fail "configuring the find_package consumer"; }
cmake --build "$work/cmake-consumer" >>"$work/cmake-consumer.log" 2>&1 || { cat "$work/cmake-consumer.log"; fail "building the find_package consumer"; }
"$work/cmake-consumer/blockps_consumer" || fail "the find_package consumer failed"
echo "ok: find_package(blockps) consumer built and ran"

# 2. pkg-config with gcc (the library is found at run time through LD_LIBRARY_PATH: the prefix is not a system dir).
export PKG_CONFIG_PATH=$libdir/pkgconfig
pkg-config --exists --print-errors blockps || fail "pkg-config does not find blockps"
[[ $(pkg-config --modversion blockps) == "$(awk -F': ' '$1 == "Version" {print $2}' "$libdir/pkgconfig/blockps.pc")" ]] || fail "modversion"
flags=$(pkg-config --cflags --libs blockps)
echo "pkg-config --cflags --libs blockps: $flags"
# shellcheck disable=SC2086  # the flags are words
gcc -std=c11 -Wall -Wextra -Werror -o "$work/pkgconfig-consumer" "$consumer/main.c" $flags || fail "gcc with pkg-config"
LD_LIBRARY_PATH=$libdir "$work/pkgconfig-consumer" || fail "the pkg-config consumer failed"
echo "ok: pkg-config consumer built and ran"
