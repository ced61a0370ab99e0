#!/usr/bin/env bash
# Packs what a GPU run needs from a CUDA build into one relocatable folder, for a host that has only the NVIDIA
# driver (no tgt, libiscsi, GoogleTest or toml++ there): copy OUT over, then run OUT/run.sh there.
#   tests/gpu/bundle.sh [--force] BUILD OUT
#   BUILD    a CUDA-enabled build directory (nvcc was found at configure time, so the aggregator holds
#            aggregator/CMakeFiles/blockps_aggregator.dir/cuda_store.cu.o), built with at least the targets
#            bs_blockps, blockps-cli, blockps_lu_io, blockps_aggregator_tests, blockps_gpu_aggregation,
#            blockps_gpu_pushpull, blockps_c, blockps_checkpoint_file and the integration tests to carry
#   OUT      the folder to make; it must not exist or be empty
#   --force  replace OUT when it is an earlier bundle (it holds manifest.txt)
#   -h, --help  this text
# OUT holds: bin/ (the GPU unit tests, every built GoogleTest integration test, the CLI `blockps` and
# `blockps_lu_io` the tests spawn, bench gpu_aggregation and gpu_pushpull, /usr/sbin/tgtd and tgtadm),
# tgt-modules/bs_blockps.so, tgt-modules-fault-injection/ (the test-only module) and blockps-preload/, lib/ (the
# ldd closure of all of them, less glibc's own libraries, libstdc++, libgcc_s and the driver's), src/ (the Python binding's sources with the project headers
# they include, and the source-tree scripts the tests name), python/ (the static libraries the binding links
# and build.sh, which compiles it there for that host's Python), run.sh, and manifest.txt (each file's
# original path: run.sh recreates the build paths the tests spawn as symlinks). Debug info is stripped. The
# folder must stay under 64 MiB; its size is printed.
# Exit 0: OUT made; 1: a missing piece or OUT over 64 MiB; 2: a wrong argument; 3: BUILD is not a CUDA build.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
blockps_prog=bundle.sh
# shellcheck source=scripts/lib/messages.sh
. "$repo/scripts/lib/messages.sh"

limit_bytes=$((64 * 1024 * 1024))
force=0
args=()
while [ "$#" -gt 0 ]; do
  case $1 in
    -h | --help) usage 0 ;;
    --force) force=1; shift ;;
    -*) blockps_die_status=2 die "unknown option '$1' (--help)" ;;
    *) args+=("$1"); shift ;;
  esac
done
[ "${#args[@]}" -eq 2 ] || blockps_die_status=2 die "need BUILD and OUT (got ${#args[@]} arguments; --help)"
command -v ldd >/dev/null || die "ldd not found (package libc-bin): it finds the libraries to carry"
command -v strip >/dev/null || die "strip not found (package binutils): the bundle carries no debug info"
command -v readelf >/dev/null || die "readelf not found (package binutils)"

[ -d "${args[0]}" ] || blockps_die_status=2 die "BUILD '${args[0]}' is not a directory"
build=$(cd "${args[0]}" && pwd)
[ -f "$build/CMakeCache.txt" ] || blockps_die_status=2 die "BUILD '$build' is not a CMake build directory (no CMakeCache.txt)"
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -n 1; }

# A CUDA build: configure found nvcc (CMAKE_CUDA_COMPILER set in CMakeFiles/*/CMakeCUDACompiler.cmake, the
# aggregator compiles cuda_store.cu) and the object is there (not cuda_store_stub.cpp's).
cuda_object=$build/aggregator/CMakeFiles/blockps_aggregator.dir/cuda_store.cu.o
if [ ! -f "$cuda_object" ]; then
  why="no $cuda_object"
  if [ "$(cache_value BLOCKPS_CUDA)" = OFF ]; then
    why="$why; it was configured with -DBLOCKPS_CUDA=OFF"
  elif ! grep -qs '^set(CMAKE_CUDA_COMPILER "..*")' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake; then
    why="$why; configure found no CUDA compiler (nvcc on PATH, CUDACXX or /usr/local/cuda/bin/nvcc)"
  else
    why="$why; configure found nvcc, but the aggregator is not built (cmake --build BUILD --target blockps_aggregator)"
  fi
  echo "$blockps_prog: ERROR: '$build' is not a CUDA build: $why. A bundle without the CUDA engine would test" \
    "nothing on a GPU." >&2
  exit 3
fi

src=$(cache_value CMAKE_HOME_DIRECTORY)
if [ -z "$src" ] || [ ! -d "$src" ]; then src=$repo; fi
[ -f "$src/client/python/blockps_module.cpp" ] || die "source tree '$src' (CMAKE_HOME_DIRECTORY) has no client/python/blockps_module.cpp"

out=${args[1]}
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  if [ "$force" = 1 ] && [ -f "$out/manifest.txt" ]; then
    rm -rf "$out"
  elif [ "$force" = 1 ]; then
    blockps_die_status=2 die "OUT '$out' is not empty and holds no manifest.txt: not an earlier bundle, not replaced"
  else
    blockps_die_status=2 die "OUT '$out' exists and is not empty (--force replaces an earlier bundle)"
  fi
fi
mkdir -p "$out" || die "cannot create OUT '$out'"
out=$(cd "$out" && pwd)
mkdir -p "$out/bin" "$out/lib" "$out/tgt-modules" "$out/tgt-modules-fault-injection" "$out/src" "$out/python/static"

manifest=$out/manifest.txt
{
  echo "# blockps GPU bundle: KIND<TAB>PATH IN THE BUNDLE<TAB>ORIGINAL PATH"
  echo "# made $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname) from build $build (source $src)"
  if git -C "$src" rev-parse --short HEAD >/dev/null 2>&1; then
    echo "# source commit $(git -C "$src" rev-parse --short HEAD)$(git -C "$src" diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
  fi
  echo "# run.sh recreates the ORIGINAL PATH of kinds unit, integration, spawned, bench, module, preload, script and"
  echo "# pythondir as symlinks to the bundle (the tests spawn them by those paths); tool, lib, src and static are"
  echo "# informational; host: a program the tests expect on the GPU host (in the second column, the compile"
  echo "# definition that names it)."
} >"$manifest"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$manifest"; }

missing_hint="build it first: cmake --build $build --target bs_blockps bs_blockps_fault_injection blockps-cli blockps_lu_io blockps_aggregator_tests blockps_gpu_aggregation blockps_gpu_pushpull blockps_c blockps_checkpoint_file (and the integration tests)"
elves=()  # original paths of every ELF file carried, for the ldd closure
# carry KIND ORIGINAL DEST: copy ORIGINAL to OUT/DEST, strip its debug info, record it.
carry() {
  local kind=$1 orig=$2 dest=$3
  [ -f "$orig" ] || die "$orig is missing: $missing_hint"
  mkdir -p "$(dirname "$out/$dest")"
  cp -L "$orig" "$out/$dest"
  chmod u+w "$out/$dest"
  strip --strip-debug "$out/$dest" 2>/dev/null || die "strip --strip-debug failed on $out/$dest"
  record "$kind" "$dest" "$orig"
  elves+=("$orig")
}

# The GPU unit tests, the programs the tests spawn, the benchmarks, tgtd.
carry unit "$build/tests/unit/aggregator/blockps_aggregator_tests" bin/blockps_aggregator_tests
carry spawned "$build/client/cli/blockps" bin/blockps
carry spawned "$build/tests/integration/blockps_lu_io" bin/blockps_lu_io
carry bench "$build/bench/gpu_aggregation" bin/gpu_aggregation
carry bench "$build/bench/gpu_pushpull" bin/gpu_pushpull
for tool in tgtd tgtadm; do
  [ -x "/usr/sbin/$tool" ] || die "/usr/sbin/$tool is missing: install Debian's tgt (scripts/setup.sh)"
  carry tool "/usr/sbin/$tool" "bin/$tool"
done
carry module "$build/tgt-modules/bs_blockps.so" tgt-modules/bs_blockps.so
# The test-only module with fault injection (FailingStoreTest), beside the product's as in the build: the tests find it
# at BLOCKPS_BACKING_STORE_DIR-fault-injection.
carry module "$build/tgt-modules-fault-injection/bs_blockps.so" tgt-modules-fault-injection/bs_blockps.so
if [ -d "$build/blockps-preload" ]; then
  for f in "$build"/blockps-preload/*.so; do
    [ -f "$f" ] && carry preload "$f" "blockps-preload/$(basename "$f")"
  done
fi

# Every GoogleTest integration test (gtest_discover_tests leaves NAME[1]_include.cmake beside each, in its group's
# folder: tests/integration/GROUP/) that is built.
integration=()
declare -A built_in=()  # name -> the build folder of its group
for inc in "$build"/tests/integration/*/*"[1]_include.cmake"; do
  [ -f "$inc" ] || continue
  name=$(basename "$inc" "[1]_include.cmake")
  dir=$(dirname "$inc")
  if [ -f "$dir/$name" ]; then
    integration+=("$name")
    built_in[$name]=$dir
  else
    warn "integration test $name is not built: not in the bundle (cmake --build $build --target $name)"
  fi
done
[ "${#integration[@]}" -gt 0 ] || die "no integration test is built in $build/tests/integration/*/: $missing_hint"
for name in "${integration[@]}"; do
  carry integration "${built_in[$name]}/$name" "bin/$name"
done

# The absolute paths compiled into the integration tests (BLOCKPS_CLI_PATH, BLOCKPS_LU_IO, the Python checks...):
# source-tree files travel under src/, the build's Python package directory is built there by python/build.sh,
# programs of the host (the interpreter, torchrun) are named for run.sh to check.
declare -A seen=()
for name in "${integration[@]}"; do
  flags=${built_in[$name]}/CMakeFiles/$name.dir/flags.make
  [ -f "$flags" ] || continue
  while read -r define path; do
    if [ -z "$path" ] || [ -n "${seen[$path]:-}" ]; then continue; fi
    seen[$path]=1
    if awk -F '\t' -v p="$path" '$3 == p { found = 1 } END { exit !found }' "$manifest"; then
      continue  # a carried binary
    elif [ "$path" = "$build/python" ]; then
      record pythondir python "$path"
    elif [[ $path == "$src"/* ]] && [ -f "$path" ]; then
      rel=${path#"$src"/}
      mkdir -p "$(dirname "$out/src/$rel")"
      cp "$path" "$out/src/$rel"
      record script "src/$rel" "$path"
    elif [[ $path == "$build"/* ]]; then
      warn "$name names $path, a build path the bundle does not carry"
    else
      record host "$define" "$path"
    fi
  done < <(grep '^CXX_DEFINES' "$flags" | grep -o -- '-D[A-Za-z0-9_]*=\\"/[^"\\]*\\"' |
    sed 's/^-D\([A-Za-z0-9_]*\)=\\"\(.*\)\\"$/\1 \2/')
done

# The Python binding's sources: client/python/blockps_module.cpp, client/python/shard_checkpoint_module.cpp, the
# package's .py files, and every project header they include (quoted includes, resolved from the source root or
# client/include).
declare -A have=()
queue=(client/python/blockps_module.cpp client/python/shard_checkpoint_module.cpp)
while [ "${#queue[@]}" -gt 0 ]; do
  rel=${queue[0]}
  queue=("${queue[@]:1}")
  [ -z "${have[$rel]:-}" ] || continue
  have[$rel]=1
  [ -f "$src/$rel" ] || die "$src/$rel (included by the Python binding) is missing"
  mkdir -p "$(dirname "$out/src/$rel")"
  cp "$src/$rel" "$out/src/$rel"
  record src "src/$rel" "$src/$rel"
  while IFS= read -r inc; do
    # From the source root, or from the client library's public face (client/include, as its targets see it).
    if [ -f "$src/$inc" ]; then
      queue+=("$inc")
    elif [ -f "$src/client/include/$inc" ]; then
      queue+=("client/include/$inc")
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$src/$rel")
done
# The package's .py files with their folders: the core (blockps/) and its PyTorch subpackage (blockps/torch/).
while IFS= read -r rel; do
  mkdir -p "$(dirname "$out/src/client/python/$rel")"
  cp "$src/client/python/$rel" "$out/src/client/python/$rel"
  record src "src/client/python/$rel" "$src/client/python/$rel"
done < <(cd "$src/client/python" && find blockps -name '*.py' -not -path '*/__pycache__/*' | sort)

# The static libraries the binding links (debug info stripped): the client library, the compressed blocks' codecs and
# the checkpoint file's (the ground floor's: no shard code, no CUDA runtime).
for a in client/libblockps.a client/libblockps_iscsi.a contract/libblockps_compressed_wire.a contract/libblockps_checkpoint_file.a; do
  [ -f "$build/$a" ] || die "$build/$a is missing: $missing_hint"
  cp "$build/$a" "$out/python/static/"
  strip --strip-debug "$out/python/static/$(basename "$a")" || die "strip --strip-debug failed on $build/$a"
  record static "python/static/$(basename "$a")" "$build/$a"
done

# The shared libraries: the ldd closure of everything carried, less glibc's own, libstdc++, libgcc_s (the GPU
# host's are newer and torch needs those) and the NVIDIA driver's.
skip_lib() {
  case $1 in
    linux-vdso.so* | ld-linux*.so* | libc.so.* | libm.so.* | libmvec.so.* | libpthread.so.* | libdl.so.* | \
      librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libnsl.so.* | libstdc++.so.* | libgcc_s.so.* | \
      libcuda.so* | libnvidia-*.so*) return 0 ;;
  esac
  return 1
}
# Also the C API library the binding's direct dependencies come from (client/libblockps.so).
c_api=$build/client/libblockps.so
[ -f "$c_api" ] || die "$c_api (target blockps_c) is missing: $missing_hint"
declare -A libs=()
for elf in "${elves[@]}" "$c_api"; do
  ldd_out=$(ldd "$elf" 2>&1) || true
  if grep -q 'not a dynamic executable' <<<"$ldd_out"; then continue; fi
  if grep -q '=> not found' <<<"$ldd_out"; then
    die "$elf needs libraries this host lacks: $(grep '=> not found' <<<"$ldd_out" | tr -s ' \t' ' ' | paste -sd ';')"
  fi
  while read -r soname path; do
    skip_lib "$soname" || libs[$soname]=$path
  done < <(sed -n 's/^[[:space:]]*\([^[:space:]]*\) => \(\/[^[:space:]]*\) .*/\1 \2/p' <<<"$ldd_out")
done
for soname in "${!libs[@]}"; do
  cp -L "${libs[$soname]}" "$out/lib/$soname"
  chmod u+w "$out/lib/$soname"
  strip --strip-debug "$out/lib/$soname" 2>/dev/null || die "strip --strip-debug failed on ${libs[$soname]}"
  record lib "lib/$soname" "${libs[$soname]}"
done

# What the binding links besides the static libraries: the direct dependencies of the C API library (the same
# objects) and of the module (for the checkpoint reader), as carried in lib/.
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
{
  for n in $(needed "$c_api"); do skip_lib "$n" || echo "blockps $n"; done
  for n in $(needed "$build/tgt-modules/bs_blockps.so"); do skip_lib "$n" || echo "checkpoint $n"; done
} >"$out/python/link-libs.txt"
while read -r _ n; do
  [ -f "$out/lib/$n" ] || die "the binding links $n, which the ldd closure did not carry"
done <"$out/python/link-libs.txt"

cp "$repo/tests/gpu/build_python.sh" "$out/python/build.sh"
chmod +x "$out/python/build.sh"
cp "$repo/tests/gpu/run.sh" "$out/run.sh"
chmod +x "$out/run.sh"

bytes=$(du -sb "$out" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
if [ "$bytes" -ge "$limit_bytes" ]; then
  die "the bundle $out is $mib MiB ($bytes bytes), over the 64 MiB limit: it is left there; carry fewer tests or strip more"
fi
say "bundle $out: $mib MiB ($bytes bytes, limit 64 MiB): ${#integration[@]} integration tests, ${#libs[@]} libraries"
say "on the GPU host: copy it over, then run $(basename "$out")/run.sh (--help)"
