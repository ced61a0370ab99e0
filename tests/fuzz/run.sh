#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, AddressSanitizer + UndefinedBehaviorSanitizer on every object) and runs
# each for a bounded time on its committed corpus (tests/fuzz/corpus/NAME, read only: new inputs go to a
# scratch directory). A crash, a sanitizer report, a leak, a timeout or an out-of-memory is a finding: the
# input that caused it is kept and printed, with the command that reproduces it, and the script exits 1.
#   tests/fuzz/run.sh --tgt-source DIR [--seconds N] [--jobs N] [--work DIR] [--only NAME]
#   --tgt-source DIR  tgt's unpacked source (scripts/setup.sh puts it in BUILD/tgt-src/src; configure needs it)
#   --seconds N       fuzzing time per target, 1..86400 (default 30)
#   --jobs N          targets fuzzed at the same time, 1..64 (default: the number of cores)
#   --work DIR        build and scratch directory (default: a new one under /var/tmp, removed at the end unless
#                     there is a finding)
#   --only NAME       one target: bsopts, cluster_file, control, checkpoint or command (default: all five)
# Needs clang and libFuzzer (Debian clang, libclang-rt-14-dev; scripts/setup.sh installs them). Exit 0: every
# target ran clean; 1: a finding or a failed build; 2: a wrong option or a missing prerequisite.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
blockps_prog=fuzz
blockps_die_status=2
# shellcheck source=scripts/lib/messages.sh
. "$repo/scripts/lib/messages.sh"
# shellcheck source=scripts/lib/phases.sh
. "$repo/scripts/lib/phases.sh"

targets=(bsopts cluster_file control checkpoint command)
tgt_source='' seconds=30 work='' only='' jobs=$(nproc)
while [ "$#" -gt 0 ]; do
  case $1 in
    --tgt-source | --seconds | --work | --only | --jobs) [ "$#" -ge 2 ] || die "$1 needs a value (--help)" ;;&
    --tgt-source) tgt_source=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h | --help) usage 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[ -f "$tgt_source/usr/tgtd.h" ] || die "--tgt-source '$tgt_source' holds no tgt source (usr/tgtd.h; scripts/setup.sh unpacks it)"
if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ] || [ "$seconds" -gt 86400 ]; then
  die "--seconds '$seconds': must be a whole number in 1..86400"
fi
if ! [[ $jobs =~ ^[0-9]+$ ]] || [ "$jobs" -lt 1 ] || [ "$jobs" -gt 64 ]; then
  die "--jobs '$jobs': must be a whole number in 1..64"
fi
if [ -n "$only" ]; then
  case " ${targets[*]} " in *" $only "*) targets=("$only") ;; *) die "--only '$only': must be one of ${targets[*]}" ;; esac
fi
for compiler in clang clang++; do
  command -v "$compiler" >/dev/null || die "$compiler is not installed (scripts/setup.sh installs it)"
done

finding=''
if [ -z "$work" ]; then
  work=$(mktemp -d /var/tmp/blockps-fuzz-XXXXXX)
  trap '[ -n "$finding" ] || rm -rf "$work"' EXIT
else
  mkdir -p "$work"
fi
build=$work/build
run_phase fuzz-configure cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBLOCKPS_WERROR=ON \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DBLOCKPS_FUZZ=ON -DBLOCKPS_TESTS=OFF -DBLOCKPS_BENCH=OFF \
  -DBLOCKPS_CUDA=OFF -DTGT_SOURCE_DIR="$tgt_source" >"$work/configure.log" ||
  { cat "$work/configure.log"; blockps_die_status=1 die "configure failed"; }
run_phase fuzz-build cmake --build "$build" --target blockps_fuzz -j"$(nproc)" ||
  blockps_die_status=1 die "the fuzz targets did not build (warnings are errors)"

# Sanitizer reports end the run with a non-zero status (libFuzzer then keeps the input as an artifact).
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# One target, in the background: its log in $work/fuzz-NAME.log, and $work/finding-NAME when it found something.
fuzz_one() { # NAME
  local name=$1 scratch=$work/corpus-$1 artifacts=$work/findings-$1/ input
  rm -rf "$artifacts" "$work/finding-$name"
  mkdir -p "$scratch" "$artifacts"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: an input that makes a parser allocate 2 GiB is a
  # finding, not a reason to swap.
  if run_phase "fuzz-$name" "$build/tests/fuzz/fuzz_$name" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts" "$scratch" "$repo/tests/fuzz/corpus/$name" \
    >"$work/fuzz-$name.log" 2>&1; then
    say "$name: clean after ${seconds}s ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$work/fuzz-$name.log" | grep -o '[0-9]*$') inputs run)"
  else
    touch "$work/finding-$name"
    tail -n 60 "$work/fuzz-$name.log" >&2
    for input in "$artifacts"*; do
      [ -e "$input" ] || continue
      warn "$name: FINDING kept in $input; reproduce with: $build/tests/fuzz/fuzz_$name $input"
    done
    warn "$name: fuzzing failed (log: $work/fuzz-$name.log)"
  fi
}
# The targets run --jobs at a time (each fuzzer is one process on one core): the time-box is per target, so on 2
# cores five targets take 3 x --seconds instead of 5 x, and each still fuzzes for --seconds.
running=0
for name in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$name" &
  running=$((running + 1))
done
wait
for name in "${targets[@]}"; do
  [ ! -e "$work/finding-$name" ] || finding=1
done
[ -z "$finding" ] || exit 1
say "${targets[*]}: no finding"
