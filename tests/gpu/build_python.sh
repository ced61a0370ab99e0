#!/usr/bin/env bash
# Compiles the blockps Python package (the binding _blockps and the checkpoint reader _shard_checkpoint) from a
# bundle of tests/gpu/bundle.sh for a Python of the host it runs on, into BUNDLE/python/blockps: use it with
# PYTHONPATH=BUNDLE/python (run.sh links the build's python/ directory, which the tests name, to it).
#   python/build.sh [PYTHON]
#   PYTHON   the interpreter to build for (default: $PYTHON, else python3); pybind11 must be installed for it
# Environment: CXX, the compiler (default g++). The host's libstdc++ is used, not the build machine's (torch
# needs the host's own). Links the bundle's static libraries (python/static) and the shared ones of lib/ named
# in python/link-libs.txt; the extensions find lib/ through their RPATH ($ORIGIN/../../lib, DT_RPATH so that it
# serves the libraries' own dependencies too).
# pybind11: `PYTHON -m pybind11 --includes` (pip's), else Debian's pybind11-dev headers (/usr/include/pybind11)
# with the interpreter's own Python.h.
# Exit 0: built; 1: a failed compile or not a bundle; 3: nothing to build with (no interpreter, compiler, pybind11
# or Python.h).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bundle=$(dirname "$here")
die() {
  echo "python/build.sh: ERROR: $*" >&2
  exit 1
}
cannot() {
  echo "python/build.sh: NOT RUN: $*" >&2
  exit 3
}
case ${1:-} in
  -h | --help)
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
esac
py=${1:-${PYTHON:-python3}}
cxx=${CXX:-g++}
[ -f "$here/link-libs.txt" ] || die "$here is not the python/ folder of a bundle (tests/gpu/bundle.sh)"
command -v "$py" >/dev/null || cannot "no Python interpreter '$py' on this host (PYTHON=...)"
command -v "$cxx" >/dev/null || cannot "no C++ compiler '$cxx' on this host (CXX=...)"
if ! includes=$("$py" -m pybind11 --includes 2>/dev/null); then
  pyinc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])') || die "$py cannot name its include directory"
  [ -f /usr/include/pybind11/pybind11.h ] || cannot "pybind11 is not installed for $py (pip install pybind11)"
  [ -f "$pyinc/Python.h" ] || cannot "no Python.h for $py in $pyinc (its development headers: python3-dev)"
  includes="-I$pyinc"
fi
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))') ||
  die "$py cannot name its extension suffix"
mkdir -p "$here/blockps"
cp -R "$bundle/src/client/python/blockps/." "$here/blockps/"  # the .py files, blockps/torch/ with them
mapfile -t blockps_libs < <(awk -v lib="$bundle/lib" '$1 == "blockps" { print lib "/" $2 }' "$here/link-libs.txt")
mapfile -t checkpoint_libs < <(awk -v lib="$bundle/lib" '$1 == "checkpoint" { print lib "/" $2 }' "$here/link-libs.txt")
read -ra include_flags <<<"$includes"
flags=(-O2 -std=c++20 -shared -fPIC -fvisibility=hidden "${include_flags[@]}" -I "$bundle/src" -I "$bundle/src/client/include")
# shellcheck disable=SC2016  # $ORIGIN is the dynamic loader's, not the shell's
rpath='-Wl,--disable-new-dtags,-rpath,$ORIGIN/../../lib'
start=$(date +%s)
"$cxx" "${flags[@]}" "$bundle/src/client/python/blockps_module.cpp" -o "$here/blockps/_blockps$suffix" \
  "$here/static/libblockps.a" "$here/static/libblockps_iscsi.a" "$here/static/libblockps_compressed_wire.a" \
  "${blockps_libs[@]}" "$rpath" &
first=$!
"$cxx" "${flags[@]}" "$bundle/src/client/python/shard_checkpoint_module.cpp" \
  -o "$here/blockps/_shard_checkpoint$suffix" "$here/static/libblockps_checkpoint_file.a" \
  -Wl,--as-needed "${checkpoint_libs[@]}" "$rpath" &
second=$!
failed=''
wait "$first" || failed="_blockps"
wait "$second" || failed="${failed:+$failed and }_shard_checkpoint"
[ -z "$failed" ] || die "compiling $failed failed (the compiler's messages are above)"
echo "python/build.sh: built $here/blockps for Python $("$py" -c 'import sys; print(sys.version.split()[0])')" \
  "($(command -v "$py")) in $(($(date +%s) - start)) s: use PYTHONPATH=$here"
