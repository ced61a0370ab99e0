#!/usr/bin/env bash
# The GPU bundle without a GPU (ctest gpu_bundle_no_gpu): tests/gpu/bundle.sh packs this build into a scratch
# folder, the folder is moved elsewhere, and its run.sh runs there in no-GPU mode. Checks: the bundle is under
# 64 MiB; every carried program and library resolves its libraries from the bundle's lib/ (glibc's own,
# libstdc++ and libgcc_s excepted) with nothing but LD_LIBRARY_PATH set; run.sh --help does nothing else; run.sh
# exits 0 with a loud NOT RUN line per GPU part and the summary table (the python part builds the binding from
# the bundle where pybind11 is there, and must not fail); a wrong part and a non-empty OUT are refused (2).
#   tests/gpu/test_bundle.sh --repo DIR --build DIR
# Exit 0: passed; 1: failed; 77: skipped (not a CUDA build, a sanitized build or one without the benchmarks, or no
# tgt on this host).
set -euo pipefail
repo='' build=''
while [ "$#" -gt 0 ]; do
  case $1 in
    --repo | --build) [ "$#" -ge 2 ] || { echo "test_bundle.sh: $1 needs a value" >&2; exit 2; } ;;&
    --repo) repo=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *) echo "test_bundle.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ ! -d "$repo" ] || [ ! -d "$build" ]; then
  echo "test_bundle.sh: need --repo DIR --build DIR (directories)" >&2
  exit 2
fi

skip() {
  echo "[  SKIPPED ] gpu_bundle_no_gpu: $*"
  exit 77
}
failures=0
fail() {
  echo "[  FAILED  ] $*"
  failures=$((failures + 1))
}
ok() { echo "[       OK ] $*"; }

if grep -q '^BLOCKPS_SANITIZE:BOOL=ON$' "$build/CMakeCache.txt" 2>/dev/null; then
  skip "$build is a sanitized build (BLOCKPS_SANITIZE=ON): not what goes to a GPU host (bundle the build scripts/test.sh makes)"
fi
if grep -q '^BLOCKPS_BENCH:BOOL=OFF$' "$build/CMakeCache.txt" 2>/dev/null; then
  skip "$build has no benchmarks (BLOCKPS_BENCH=OFF): the bundle carries gpu_aggregation and gpu_pushpull"
fi
if [ ! -x /usr/sbin/tgtd ] || [ ! -x /usr/sbin/tgtadm ]; then
  skip "no /usr/sbin/tgtd or tgtadm here (package tgt): nothing to bundle"
fi
scratch=$(mktemp -d "${TMPDIR:-/tmp}/blockps-gpu-bundle-XXXXXX")
trap 'rm -rf "$scratch"' EXIT

rc=0
bash "$repo/tests/gpu/bundle.sh" "$build" "$scratch/made" >"$scratch/bundle.log" 2>&1 || rc=$?
cat "$scratch/bundle.log"
if [ "$rc" = 3 ]; then
  skip "$build is not a CUDA build (bundle.sh: $(grep -o 'is not a CUDA build.*' "$scratch/bundle.log" | head -n 1))"
fi
[ "$rc" = 0 ] || { fail "bundle.sh exited $rc"; exit 1; }
ok "bundle.sh made the bundle"

# Relocatable: the bundle works from wherever it is put.
mv "$scratch/made" "$scratch/moved"
b=$scratch/moved

bytes=$(du -sb "$b" | cut -f1)
if [ "$bytes" -lt $((64 * 1024 * 1024)) ]; then ok "bundle size $bytes bytes < 64 MiB"; else fail "bundle size $bytes bytes >= 64 MiB"; fi

# Every ELF file resolves its libraries from the bundle.
bad=''
checked=0
for f in "$b"/bin/* "$b"/tgt-modules/* "$b"/blockps-preload/* "$b"/lib/*; do
  [ -f "$f" ] || continue
  out=$(env -i LD_LIBRARY_PATH="$b/lib" ldd "$f" 2>&1) || true
  grep -q 'not a dynamic executable' <<<"$out" && continue
  checked=$((checked + 1))
  while read -r line; do
    bad="$bad
  ${f#"$b"/}: $line"
  done < <(grep '=>' <<<"$out" | grep -v "=> $b/lib/" |
    grep -Ev '^[[:space:]]*(libc|libm|libmvec|libpthread|libdl|librt|libresolv|libstdc\+\+|libgcc_s)\.so' || true)
done
if [ -z "$bad" ] && [ "$checked" -gt 0 ]; then
  ok "$checked programs and libraries resolve their libraries from the bundle"
else
  fail "libraries not resolved from the bundle ($checked checked):$bad"
fi

# --help: usage, exit 0, nothing made.
if out=$(bash "$b/run.sh" --help) && grep -q 'run.sh \[options\] \[BUNDLE\]' <<<"$out" &&
  [ -z "$(find "$b" -maxdepth 1 -name 'results-*')" ]; then
  ok "run.sh --help prints the usage and makes nothing"
else
  fail "run.sh --help: no usage, a failure, or a results folder made"
fi

# Refusals: a wrong part (run.sh) and a non-empty OUT (bundle.sh), both status 2 and a reason.
rc=0
bash "$b/run.sh" --parts bogus >"$scratch/refused.log" 2>&1 || rc=$?
if [ "$rc" = 2 ] && grep -q "unknown part 'bogus'" "$scratch/refused.log"; then ok "run.sh refuses --parts bogus (2)"; else
  fail "run.sh --parts bogus: exit $rc, $(cat "$scratch/refused.log")"
fi
rc=0
bash "$repo/tests/gpu/bundle.sh" "$build" "$b" >"$scratch/refused.log" 2>&1 || rc=$?
if [ "$rc" = 2 ] && grep -q 'exists and is not empty' "$scratch/refused.log"; then ok "bundle.sh refuses a non-empty OUT (2)"; else
  fail "bundle.sh into a non-empty OUT: exit $rc, $(cat "$scratch/refused.log")"
fi

# The no-GPU run: exit 0, one NOT RUN line per GPU part, the summary.
rc=0
start=$(date +%s)
bash "$b/run.sh" --no-gpu --results "$scratch/results" >"$scratch/run.log" 2>&1 || rc=$?
cat "$scratch/run.log"
if [ "$rc" = 0 ]; then ok "run.sh --no-gpu exited 0 in $(($(date +%s) - start)) s"; else fail "run.sh --no-gpu exited $rc"; fi
for p in unit sanitizer integration gpu_aggregation gpu_pushpull-sgd gpu_pushpull-adam gpu_pushpull-adam-bf16 cuda_workers; do
  line="*** NOT RUN: no usable GPU on this host ($p: --no-gpu given) ***"
  if grep -qF -- "$line" "$scratch/run.log" && grep -qF -- "$line" "$scratch/results/$p.log"; then ok "$p: NOT RUN line"; else
    fail "$p: no '$line' in the output and $p.log"
  fi
done
if grep -Eq '^part +result +seconds +log$' "$scratch/run.log" && [ -f "$scratch/results/summary.txt" ] &&
  [ "$(grep -Ec '^(python|unit|sanitizer|integration|gpu_aggregation|gpu_pushpull-sgd|gpu_pushpull-adam|gpu_pushpull-adam-bf16|cuda_workers) +(PASS|NOT RUN) ' "$scratch/results/summary.txt")" = 9 ]; then
  ok "summary table: 9 parts, none failed"
else
  fail "no summary table of 9 parts (PASS or NOT RUN) in the output and results/summary.txt"
fi

# Without --no-gpu on a host without a GPU, the detection itself says why.
if ! command -v nvidia-smi >/dev/null || [ ! -e /dev/nvidia0 ]; then
  rc=0
  bash "$b/run.sh" --parts unit --results "$scratch/detect" >"$scratch/detect.log" 2>&1 || rc=$?
  if [ "$rc" = 0 ] && grep -Eq '^\*\*\* NOT RUN: no usable GPU on this host \(unit: (nvidia-smi|/dev/nvidia0).*\) \*\*\*$' "$scratch/detect.log"; then
    ok "no GPU detected: $(grep -m 1 'NOT RUN' "$scratch/detect.log")"
  else
    fail "run.sh on this GPU-less host: exit $rc, $(cat "$scratch/detect.log")"
  fi
fi

if [ "$failures" -gt 0 ]; then
  echo "gpu_bundle_no_gpu: $failures check(s) FAILED"
  exit 1
fi
echo "gpu_bundle_no_gpu: all checks passed"
