# shellcheck shell=bash
# Messages and --help of the blockps scripts: every line names the script. Source it after setting (optional):
#   blockps_prog          the name each line starts with (default blockps)
#   blockps_die_status    die's exit status (default 1; attach.sh and fio-run.sh document 2)
#   blockps_say_stderr    non-empty: say writes to stderr (scripts whose stdout is data)
blockps_prog=${blockps_prog:-blockps}
say() {
  if [ -n "${blockps_say_stderr:-}" ]; then echo "$blockps_prog: $*" >&2; else echo "$blockps_prog: $*"; fi
}
warn() { echo "$blockps_prog: WARNING: $*" >&2; }
die() {
  echo "$blockps_prog: ERROR: $*" >&2
  exit "${blockps_die_status:-1}"
}
# usage [STATUS]: the running script's header comment (line 2 up to `set -euo`) as its help, then exit.
usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[-1]}" | sed '$d; s/^# \{0,1\}//'
  exit "${1:-0}"
}
# A command that fails under `set -e` says which before the script ends, instead of ending it in silence
# (a failure deep in a pipeline or a command substitution otherwise leaves no line). Fires only where `set -e`
# exits; die() and `exit` do not fire it.
blockps_command_failed() {
  echo "$blockps_prog: ERROR: line $2: \`$3\` failed (exit $1)" >&2
}
trap 'blockps_command_failed "$?" "$LINENO" "$BASH_COMMAND"' ERR
