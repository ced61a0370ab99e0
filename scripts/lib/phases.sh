# shellcheck shell=bash
# Phase timing for scripts/test.sh, scripts/demo.sh's build, tests/vm/run.sh and .ci/run: where the time goes on
# a slow machine shows in the log. Source it, then:
#   run_phase NAME COMMAND [ARGS...]   runs COMMAND (a program, not a shell function: `set -e` does not reach into
#                                      a function called from here), prints "phase: NAME took Ns", appends
#                                      NAME<TAB>SECONDS<TAB>EXIT to $BLOCKPS_PHASE_LOG when that is set, and
#                                      returns COMMAND's exit status
#   record_phase NAME SECONDS [EXIT]   only records a phase timed elsewhere (the VM's steps)
record_phase() {
  [ -z "${BLOCKPS_PHASE_LOG:-}" ] || printf '%s\t%s\t%s\n' "$1" "$2" "${3:-0}" >>"$BLOCKPS_PHASE_LOG"
}
run_phase() {
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "phase: $name took $((SECONDS - t0))s$([ "$rc" = 0 ] || echo " (exit $rc)")"
  record_phase "$name" $((SECONDS - t0)) "$rc"
  return "$rc"
}
