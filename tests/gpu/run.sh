#!/usr/bin/env bash
# Runs the GPU checks from a bundle made by tests/gpu/bundle.sh, on a host that has only the NVIDIA driver: no
# tgt, libiscsi or GoogleTest there, and none of the build machine's paths. Copied into the bundle as run.sh.
#   run.sh [options] [BUNDLE]
#   BUNDLE            the bundle (default: the folder this script is in, when it is BUNDLE/run.sh)
#   --results DIR     where the logs go, one per part (default: BUNDLE/results-YYYYMMDD-HHMMSS)
#   --parts LIST      comma-separated parts, of: python, unit, sanitizer, integration, gpu_aggregation,
#                     gpu_pushpull, cuda_workers (default: all, in that order)
#   --tests LIST      comma-separated integration test binaries (default: every one the bundle carries)
#   --device DEV      the device of every blockps LU in the integration tests (BLOCKPS_TEST_DEVICE; default gpu:0)
#   --timeout S       limit of each test binary and benchmark run, seconds (default 1800)
#   --install-module  copy the module into /usr/lib/tgt/backing-store (tgtd's own module directory) instead of
#                     pointing the tests at BUNDLE/tgt-modules with BLOCKPS_BACKING_STORE_DIR
#   --no-gpu          act as on a host without a GPU: the NOT RUN path, nothing on the host is changed
#   -h, --help        this text; nothing else is done
# Parts: python (python/build.sh: the binding for this host's Python; where the interpreter compiled into the
# tests has no pybind11, python3 of the same Python version builds it; NOT RUN without python3 or pybind11),
# unit (blockps_aggregator_tests, gtest filter $BLOCKPS_GPU_UNIT_FILTER, default *Gpu*), sanitizer
# (compute-sanitizer memcheck with leak check over the same tests; NOT RUN when compute-sanitizer is not
# found), integration (each test binary with BLOCKPS_TEST_DEVICE=DEV), gpu_aggregation, gpu_pushpull (one run
# per OPT[:DTYPE] of $BLOCKPS_GPU_PUSHPULL_RUNS, default "sgd adam adam:bf16", part gpu_pushpull-OPT[-DTYPE],
# --seconds $BLOCKPS_GPU_BENCH_SECONDS, default 2, --rounds $BLOCKPS_GPU_BENCH_ROUNDS, default 5), cuda_workers
# (the Python check scripts with the model on CUDA: the bundle's blockps_torch_optimizer_tests,
# blockps_ddp_hook_tests and blockps_torch_hosts_tests with BLOCKPS_CHECK_DEVICE=cuda and BLOCKPS_TEST_DEVICE=DEV, gtest filter
# $BLOCKPS_GPU_WORKER_FILTER, default *; needs the python part's binding and a torch that sees the GPU; NOT RUN
# without one). A summary table (part, result, seconds, log) ends the run and is kept in RESULTS/summary.txt.
# A usable GPU: nvidia-smi found and `nvidia-smi -L` succeeds, and /dev/nvidia0 exists. Without one each GPU
# part prints `*** NOT RUN: no usable GPU on this host (PART: WHY) ***` and the run exits 0.
# With one, PATH and LD_LIBRARY_PATH lead to the bundle's bin/ and lib/, /usr/lib/tgt/backing-store (the mount
# point of BLOCKPS_BACKING_STORE_DIR) and /var/run/tgtd are created, and the build paths of manifest.txt the
# tests spawn (the CLI, blockps_lu_io, the python/ directory, the check scripts) are made symlinks into the
# bundle where nothing is there (listed in RESULTS/links.txt; an existing file is left alone).
# cuda_workers: the tests spawn the interpreter and torchrun compiled into them (BLOCKPS_PYTHON, BLOCKPS_TORCHRUN in
# manifest.txt). Where this host lacks them, they are made: a script that runs the torch interpreter (PYTHON, else
# python3), and torchrun beside it. Where BLOCKPS_PYTHON is there but cannot import torch, its user site
# (PYTHONUSERBASE=RESULTS/pyuser) gets a .pth naming the torch interpreter's site-packages (same Python version).
# Environment: PYTHON (the python part's interpreter; default: the one compiled into the tests as BLOCKPS_PYTHON
# when this host has it, else python3), CXX (python part), BLOCKPS_GPU_UNIT_FILTER, BLOCKPS_GPU_BENCH_SECONDS,
# BLOCKPS_GPU_BENCH_ROUNDS, BLOCKPS_GPU_PUSHPULL_RUNS, BLOCKPS_GPU_WORKER_FILTER.
# Exit 0: no part failed (NOT RUN is no failure); 1: a part failed; 2: a wrong argument or not a bundle.
set -euo pipefail
prog=run.sh
say() { echo "$prog: $*"; }
warn() { echo "$prog: WARNING: $*" >&2; }
die() {
  echo "$prog: ERROR: $*" >&2
  exit "${die_status:-1}"
}
usage_error() {
  die_status=2
  die "$* (--help)"
}

all_parts=(python unit sanitizer integration gpu_aggregation gpu_pushpull cuda_workers)
bundle='' results='' parts_arg='' tests_arg='' device=gpu:0 limit=1800 install_module=0 no_gpu=0
while [ "$#" -gt 0 ]; do
  case $1 in
    --results | --parts | --tests | --device | --timeout) [ "$#" -ge 2 ] || usage_error "$1 needs a value" ;;&
    --results) results=$2; shift 2 ;;
    --parts) parts_arg=$2; shift 2 ;;
    --tests) tests_arg=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --install-module) install_module=1; shift ;;
    --no-gpu) no_gpu=1; shift ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    -*) usage_error "unknown option '$1'" ;;
    *)
      [ -z "$bundle" ] || usage_error "one BUNDLE only (got '$bundle' and '$1')"
      bundle=$1
      shift
      ;;
  esac
done
[[ $limit =~ ^[1-9][0-9]*$ ]] || usage_error "--timeout '$limit': a whole number of seconds >= 1"
[[ $device =~ ^(cpu|auto|gpu:[0-9]+)$ ]] || usage_error "--device '$device': cpu, auto or gpu:N"
parts=("${all_parts[@]}")
if [ -n "$parts_arg" ]; then
  IFS=, read -ra parts <<<"$parts_arg"
  for p in "${parts[@]}"; do
    [[ " ${all_parts[*]} " == *" $p "* ]] || usage_error "--parts: unknown part '$p' (parts: ${all_parts[*]})"
  done
fi
wants() { [[ " ${parts[*]} " == *" $1 "* ]]; }

if [ -z "$bundle" ]; then
  bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  [ -f "$bundle/manifest.txt" ] || usage_error "$bundle holds no manifest.txt: run BUNDLE/run.sh of a bundle that" \
    "tests/gpu/bundle.sh made, or name the BUNDLE"
fi
[ -d "$bundle" ] || usage_error "BUNDLE '$bundle' is not a directory"
bundle=$(cd "$bundle" && pwd)
manifest=$bundle/manifest.txt
[ -f "$manifest" ] || usage_error "'$bundle' is not a bundle of tests/gpu/bundle.sh (no manifest.txt)"
for f in bin/blockps_aggregator_tests bin/tgtd tgt-modules/bs_blockps.so; do
  [ -f "$bundle/$f" ] || die "the bundle $bundle lacks $f: make it again with tests/gpu/bundle.sh"
done

# The integration tests to run: the manifest's, or --tests (each must be in it).
mapfile -t bundled_tests < <(awk -F '\t' '$1 == "integration" { sub(/^bin\//, "", $2); print $2 }' "$manifest")
tests=("${bundled_tests[@]}")
if [ -n "$tests_arg" ]; then
  IFS=, read -ra tests <<<"$tests_arg"
  for t in "${tests[@]}"; do
    [[ " ${bundled_tests[*]} " == *" $t "* ]] || usage_error "--tests: '$t' is not in the bundle (it has: ${bundled_tests[*]})"
  done
fi

[ -n "$results" ] || results=$bundle/results-$(date +%Y%m%d-%H%M%S)
mkdir -p "$results" || die "cannot create the results folder $results (--results DIR elsewhere)"
results=$(cd "$results" && pwd)

export PATH="$bundle/bin:$PATH"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Whether this host has a usable GPU; gpu_why says why not.
gpu_why=''
if [ "$no_gpu" = 1 ]; then
  gpu_why='--no-gpu given'
elif ! command -v nvidia-smi >/dev/null; then
  gpu_why='nvidia-smi not found'
elif ! smi=$(timeout 60 nvidia-smi -L 2>&1); then
  gpu_why="nvidia-smi -L failed: $(head -n 1 <<<"$smi")"
elif [ ! -e /dev/nvidia0 ]; then
  gpu_why='/dev/nvidia0 absent'
fi

rows=()     # part|result|seconds|log
failed=0
row() {
  rows+=("$1|$2|$3|$4")
  if [ "$2" = FAIL ]; then failed=1; fi
}
not_run_no_gpu() {
  local line="*** NOT RUN: no usable GPU on this host ($1: $gpu_why) ***"
  echo "$line"
  echo "$line" >"$results/$1.log"
  row "$1" "NOT RUN" 0 "$results/$1.log"
}
# run_logged LOG CMD...: CMD in RESULTS under the time limit, its output in LOG; returns CMD's status (124: out of
# time).
run_logged() {
  local log=$1 rc=0
  shift
  echo "\$ $*" >"$log"
  (cd "$results" && exec timeout --kill-after=30 "$limit" "$@") >>"$log" 2>&1 || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "*** $prog: killed after the ${limit} s limit (--timeout) ***" >>"$log"; fi
  return "$rc"
}
# part NAME LOG CHECK CMD...: runs CMD (run_logged); PASS when it exits 0 and CHECK (a function of LOG) agrees.
part() {
  local name=$1 log=$2 check=$3 start rc=0 result=PASS
  shift 3
  say "$name: running ($log)"
  start=$(date +%s)
  run_logged "$log" "$@" || rc=$?
  if [ "$rc" != 0 ]; then
    result=FAIL
    echo "*** $prog: $name: exit status $rc ***" >>"$log"
  elif ! "$check" "$log"; then
    result=FAIL
  fi
  say "$name: $result"
  row "$name" "$result" "$(($(date +%s) - start))" "$log"
}
# Checks of a part's log beyond its exit status (each says what it found in the log).
# shellcheck disable=SC2317  # called through part's CHECK argument
ok_always() { :; }
# shellcheck disable=SC2317  # called through part's CHECK argument
no_skips() {  # a GPU test that skips did not test the GPU
  if grep -q '^\[  SKIPPED \]' "$1"; then
    echo "*** $prog: tests were SKIPPED on a host with a GPU: the CUDA engine was not tested ***" >>"$1"
    return 1
  fi
}
# shellcheck disable=SC2317  # called through part's CHECK argument
sanitizer_clean() {
  if ! grep -q 'ERROR SUMMARY: 0 errors' "$1"; then
    echo "*** $prog: compute-sanitizer reported errors (or no summary) ***" >>"$1"
    return 1
  fi
}
# shellcheck disable=SC2317  # called through part's CHECK argument
bench_ran() {
  if grep -q 'NOT RUN' "$1"; then
    echo "*** $prog: the benchmark measured nothing on a host with a GPU ***" >>"$1"
    return 1
  fi
}

# The GPU host's set-up: the module where tgtd loads it, tgtd's socket directory, the build paths the tests spawn.
setup_host() {
  local log=$results/setup.log kind path orig
  : >"$log"
  if [ "$install_module" = 1 ]; then
    { mkdir -p /usr/lib/tgt/backing-store /usr/lib/tgt/backing-store-fault-injection &&
      cp "$bundle/tgt-modules/bs_blockps.so" /usr/lib/tgt/backing-store/ &&
      cp "$bundle/tgt-modules-fault-injection/bs_blockps.so" /usr/lib/tgt/backing-store-fault-injection/; } ||
      die "--install-module: cannot copy the module into /usr/lib/tgt/backing-store (root needed; it must be writable)"
    unset BLOCKPS_BACKING_STORE_DIR
    echo "module: copied into /usr/lib/tgt/backing-store" >>"$log"
  else
    # tgtd loads /usr/lib/tgt/backing-store; the tests bind-mount BLOCKPS_BACKING_STORE_DIR over it in tgtd's
    # own mount namespace (tests/support/tgtd_instance.cpp), so that directory must exist.
    mkdir -p /usr/lib/tgt/backing-store ||
      die "cannot create /usr/lib/tgt/backing-store, the mount point of the module directory (root needed)"
    export BLOCKPS_BACKING_STORE_DIR="$bundle/tgt-modules"
    echo "module: BLOCKPS_BACKING_STORE_DIR=$BLOCKPS_BACKING_STORE_DIR" >>"$log"
  fi
  mkdir -p /var/run/tgtd || die "cannot create /var/run/tgtd (tgtd's control sockets; root needed)"
  : >"$results/links.txt"
  while IFS=$'\t' read -r kind path orig; do
    case $kind in
      unit | integration | spawned | bench | module | preload | script | pythondir) ;;
      host)
        [ -e "$orig" ] || warn "the tests expect $orig on this host and it is not there (tests that use it fail)"
        continue
        ;;
      *) continue ;;
    esac
    if [ -L "$orig" ] || [ ! -e "$orig" ]; then
      { mkdir -p "$(dirname "$orig")" && ln -sfn "$bundle/$path" "$orig"; } ||
        die "cannot link $orig to $bundle/$path (a build path the tests spawn)"
      echo "$orig -> $bundle/$path" >>"$results/links.txt"
    else
      echo "left alone (exists): $orig" >>"$log"
    fi
  done < <(grep -v '^#' "$manifest")
  echo "links: $(wc -l <"$results/links.txt") build paths linked into the bundle ($results/links.txt)" >>"$log"
  {
    echo "PATH=$PATH"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "nvidia-smi -L:"
    nvidia-smi -L
  } >>"$log" 2>&1 || true
}

say "bundle $bundle, results in $results"
if [ -n "$gpu_why" ]; then
  say "no usable GPU: $gpu_why"
else
  say "GPU: $(head -n 1 <<<"$smi")"
  setup_host
fi

if wants python; then
  # The interpreter the tests spawn (BLOCKPS_PYTHON, compiled in) when this host has it, else python3.
  py=$(awk -F '\t' '$1 == "host" && $2 == "BLOCKPS_PYTHON" { print $3; exit }' "$manifest")
  if [ -n "${PYTHON:-}" ]; then py=$PYTHON; elif [ -z "$py" ] || [ ! -x "$py" ]; then py=python3; fi
  py_version='import sys; print("%d.%d" % sys.version_info[:2])'
  log=$results/python.log
  say "python: running ($log)"
  start=$(date +%s) rc=0
  run_logged "$log" bash "$bundle/python/build.sh" "$py" || rc=$?
  if [ "$rc" = 3 ] && [ -z "${PYTHON:-}" ] && [ "$py" != python3 ] && command -v python3 >/dev/null &&
    [ "$("$py" -c "$py_version" 2>/dev/null)" = "$(python3 -c "$py_version")" ]; then
    # The compiled interpreter cannot build (no pybind11 for it): python3 of the same version can, for both.
    rc=0 py=python3
    tail -n 1 "$log" >>"$log.first"
    run_logged "$log" bash "$bundle/python/build.sh" "$py" || rc=$?
    cat "$log.first" >>"$log" && rm -f "$log.first"
  fi
  if [ "$rc" = 0 ] && ! (cd "$results" && PYTHONPATH="$bundle/python" "$py" -c 'import blockps, blockps._shard_checkpoint' >>"$log" 2>&1); then
    echo "*** $prog: python: the built package does not import ***" >>"$log"
    rc=1
  fi
  case $rc in
    0) result=PASS ;;
    3) result="NOT RUN" && tail -n 1 "$log" ;;  # no interpreter, compiler or pybind11: nothing to build with
    *) result=FAIL ;;
  esac
  say "python: $result"
  row python "$result" "$(($(date +%s) - start))" "$log"
fi

unit_filter=${BLOCKPS_GPU_UNIT_FILTER:-*Gpu*}
if wants unit; then
  if [ -n "$gpu_why" ]; then
    not_run_no_gpu unit
  else
    part unit "$results/unit.log" no_skips "$bundle/bin/blockps_aggregator_tests" "--gtest_filter=$unit_filter"
  fi
fi

if wants sanitizer; then
  sanitizer=$(command -v compute-sanitizer || true)
  if [ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
    sanitizer=/usr/local/cuda/bin/compute-sanitizer
  fi
  if [ -n "$gpu_why" ]; then
    not_run_no_gpu sanitizer
  elif [ -z "$sanitizer" ]; then
    echo "NOT RUN: compute-sanitizer not found (PATH, /usr/local/cuda/bin)" | tee "$results/sanitizer.log"
    row sanitizer "NOT RUN" 0 "$results/sanitizer.log"
  else
    part sanitizer "$results/sanitizer.log" sanitizer_clean "$sanitizer" --tool memcheck --leak-check full \
      --error-exitcode 1 "$bundle/bin/blockps_aggregator_tests" "--gtest_filter=$unit_filter"
  fi
fi

if wants integration; then
  if [ -n "$gpu_why" ]; then
    not_run_no_gpu integration
  else
    mkdir -p "$results/integration"
    for t in "${tests[@]}"; do
      part "integration:$t" "$results/integration/$t.log" ok_always env "BLOCKPS_TEST_DEVICE=$device" "$bundle/bin/$t"
    done
  fi
fi

bench_seconds=${BLOCKPS_GPU_BENCH_SECONDS:-2}
bench_rounds=${BLOCKPS_GPU_BENCH_ROUNDS:-5}
if wants gpu_aggregation; then
  if [ -n "$gpu_why" ]; then
    not_run_no_gpu gpu_aggregation
  else
    part gpu_aggregation "$results/gpu_aggregation.log" bench_ran "$bundle/bin/gpu_aggregation"
  fi
fi
if wants gpu_pushpull; then
  for run in ${BLOCKPS_GPU_PUSHPULL_RUNS:-sgd adam adam:bf16}; do
    opt=${run%%:*} dtype=f32
    [[ $run == *:* ]] && dtype=${run#*:}
    name=gpu_pushpull-$opt
    [ "$dtype" = f32 ] || name=$name-$dtype
    if [ -n "$gpu_why" ]; then
      not_run_no_gpu "$name"
    else
      part "$name" "$results/$name.log" bench_ran "$bundle/bin/gpu_pushpull" \
        --opt "$opt" --dtype "$dtype" --seconds "$bench_seconds" --rounds "$bench_rounds"
    fi
  done
fi

# The interpreter with torch for the cuda_workers part, and the compiled paths the tests spawn made to reach it;
# torch_why says why not (then the part is NOT RUN).
torch_why=''
prepare_torch() {
  local log=$1 compiled_py compiled_run candidate torch_py='' site version
  compiled_py=$(awk -F '\t' '$1 == "host" && $2 == "BLOCKPS_PYTHON" { print $3; exit }' "$manifest")
  compiled_run=$(awk -F '\t' '$1 == "host" && $2 == "BLOCKPS_TORCHRUN" { print $3; exit }' "$manifest")
  if [ -z "$compiled_py" ] || [ -z "$compiled_run" ]; then
    torch_why='the bundle carries no Python tests (BLOCKPS_PYTHON or BLOCKPS_TORCHRUN missing in manifest.txt)'
    return
  fi
  for candidate in "${PYTHON:-}" python3 "$compiled_py"; do
    if [ -z "$candidate" ] || ! command -v "$candidate" >/dev/null; then continue; fi
    if "$candidate" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >>"$log" 2>&1; then
      torch_py=$(command -v "$candidate")
      break
    fi
  done
  if [ -z "$torch_py" ]; then
    torch_why="no Python here imports a torch that sees the GPU (tried: ${PYTHON:-} python3 $compiled_py)"
    return
  fi
  echo "torch interpreter: $torch_py ($("$torch_py" -c 'import torch; print("torch", torch.__version__)'))" >>"$log"
  if [ ! -e "$compiled_py" ]; then
    if ! { mkdir -p "$(dirname "$compiled_py")" && printf '#!/bin/sh\nexec %s "$@"\n' "$torch_py" >"$compiled_py" &&
      chmod +x "$compiled_py"; }; then
      torch_why="cannot write $compiled_py (root needed)"
      return
    fi
    echo "$compiled_py: a script that runs $torch_py" | tee -a "$results/links.txt" >>"$log"
  elif ! "$compiled_py" -c 'import torch' >/dev/null 2>&1; then
    version='import sys; print("%d.%d" % sys.version_info[:2])'
    if [ "$("$compiled_py" -c "$version")" != "$("$torch_py" -c "$version")" ]; then
      torch_why="$compiled_py (compiled into the tests) has no torch and another Python version than $torch_py"
      return
    fi
    site=$("$torch_py" -c 'import site; print("\n".join(site.getsitepackages()))')
    export PYTHONUSERBASE=$results/pyuser
    local user_site
    user_site=$(PYTHONUSERBASE=$PYTHONUSERBASE "$compiled_py" -c 'import site; print(site.getusersitepackages())')
    mkdir -p "$user_site" && echo "$site" >"$user_site/blockps-gpu-torch.pth"
    echo "$compiled_py: torch from $torch_py's site-packages through $user_site/blockps-gpu-torch.pth" >>"$log"
  fi
  if [ ! -e "$compiled_run" ]; then
    if [ -x "$(dirname "$torch_py")/torchrun" ]; then
      mkdir -p "$(dirname "$compiled_run")" && ln -s "$(dirname "$torch_py")/torchrun" "$compiled_run"
    else
      mkdir -p "$(dirname "$compiled_run")" &&
        printf '#!/bin/sh\nexec %s -m torch.distributed.run "$@"\n' "$torch_py" >"$compiled_run" && chmod +x "$compiled_run"
    fi || { torch_why="cannot make $compiled_run (root needed)"; return; }
    echo "$compiled_run: torchrun of $torch_py" | tee -a "$results/links.txt" >>"$log"
  fi
  if ! (cd "$results" && PYTHONPATH="$bundle/python" "$compiled_py" -c 'import torch, blockps.torch' >>"$log" 2>&1); then
    torch_why="$compiled_py cannot import torch and blockps.torch (the python part builds the binding; see $log)"
  fi
}
if wants cuda_workers; then
  if [ -n "$gpu_why" ]; then
    not_run_no_gpu cuda_workers
  else
    log=$results/cuda_workers.log
    : >"$log"
    prepare_torch "$log"
    if [ -n "$torch_why" ]; then
      echo "*** NOT RUN: cuda_workers: $torch_why ***" | tee -a "$log"
      row cuda_workers "NOT RUN" 0 "$log"
    else
      mkdir -p "$results/cuda_workers"
      for t in blockps_torch_optimizer_tests blockps_ddp_hook_tests blockps_torch_hosts_tests; do
        if [[ " ${bundled_tests[*]} " != *" $t "* ]]; then
          echo "*** NOT RUN: cuda_workers: $t is not in the bundle ***" | tee -a "$log"
          row "cuda_workers:$t" "NOT RUN" 0 "$log"
          continue
        fi
        part "cuda_workers:$t" "$results/cuda_workers/$t.log" no_skips env BLOCKPS_CHECK_DEVICE=cuda \
          "BLOCKPS_TEST_DEVICE=$device" "$bundle/bin/$t" "--gtest_filter=${BLOCKPS_GPU_WORKER_FILTER:-*}"
      done
    fi
  fi
fi

{
  echo
  echo "blockps GPU run, $(date '+%Y-%m-%d %H:%M:%S'), bundle $bundle"
  if [ -n "$gpu_why" ]; then echo "GPU: none usable ($gpu_why)"; else echo "GPU: $(head -n 1 <<<"$smi")"; fi
  printf '%-44s %-8s %8s  %s\n' part result seconds log
  for r in "${rows[@]}"; do
    IFS='|' read -r name result seconds log <<<"$r"
    printf '%-44s %-8s %8s  %s\n' "$name" "$result" "$seconds" "${log#"$results"/}"
  done
  echo "logs in $results"
} | tee "$results/summary.txt"
if [ "$failed" = 1 ]; then
  say "FAILED: see the FAIL rows above and their logs"
  exit 1
fi
exit 0
