#!/usr/bin/env bash
# Every product source has a test a newcomer finds by its name and place: for client/, aggregator/, contract/ and
# ps_backend/, each .cpp, .cu and .c file, and each header of contract/ (the ground floor's rules are mostly inline),
# there is a test_<name>.cpp, .c or .py in the unit folder that mirrors its folder (client/cli/table.cpp:
# tests/unit/client/cli/test_table.cpp), or a line in tests/unit/tested_elsewhere.txt
#   SOURCE  TEST-FILE  why
# naming the test file that covers it (one that exists). Fails naming every source that has neither, and every map
# line whose source or test file is gone (a stale line would hide the next source of that name).
# Usage: every_source_has_a_test.sh [SOURCE-ROOT]  (default: the checkout this script is in)
set -euo pipefail

root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cd "$root"
map=tests/unit/tested_elsewhere.txt
[[ -f $map ]] || { echo "FAIL: $map is missing" >&2; exit 1; }

declare -A mapped=()

failures=0
line_number=0
while IFS= read -r line || [[ -n $line ]]; do
  line_number=$((line_number + 1))
  [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
  read -r source test why <<<"$line"
  if [[ -z ${why:-} ]]; then
    echo "FAIL: $map:$line_number: want 'SOURCE  TEST-FILE  why', got: $line" >&2
    failures=$((failures + 1))
  elif [[ ! -f $source ]]; then
    echo "FAIL: $map:$line_number: $source does not exist (remove the line, or fix its path)" >&2
    failures=$((failures + 1))
  elif [[ ! -f $test ]]; then
    echo "FAIL: $map:$line_number: $source: its test $test does not exist" >&2
    failures=$((failures + 1))
  else
    mapped[$source]=$test
  fi
done <"$map"

sources=0
while IFS= read -r source; do
  sources=$((sources + 1))
  name=${source##*/}
  name=${name%.*}
  mirror=tests/unit/${source%/*}/test_$name
  [[ -f $mirror.cpp || -f $mirror.c || -f $mirror.py || -n ${mapped[$source]:-} ]] && continue
  echo "FAIL: $source has no test: add $mirror.cpp (or .py), or a line in $map naming the test that covers it" \
    "and why" >&2
  failures=$((failures + 1))
done < <(find client aggregator contract ps_backend -type f \( -name '*.cpp' -o -name '*.cu' -o -name '*.c' \) |
  cat - <(find contract -type f -name '*.h') | sort)

if ((failures != 0)); then
  echo "FAIL: $failures of the checks above ($sources sources)" >&2
  exit 1
fi
echo "every one of $sources product sources has a test named for it or mapped in $map"
