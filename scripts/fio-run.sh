#!/usr/bin/env bash
# Runs a fio job file written for /dev devices (fio_jobs/*.fio) against blockps shards on a machine WITHOUT a
# kernel iSCSI initiator: each device variable is served by a qemu-nbd over QEMU's userspace iSCSI driver,
# and fio drives it with its nbd engine.
#
#   scripts/fio-run.sh [OPTIONS] JOBFILE VAR=URL [VAR=URL ...] [-- FIO-ARGS...]
#   e.g. scripts/fio-run.sh fio_jobs/matrix-libaio-qd16.fio \
#          BLOCKPS_GRAD_DEV=iscsi://127.0.0.1:3261/iqn.2026-11.io.blockps:shard0/1 -- --output-format=json
#
# VAR=URL      a device variable of the job file (its lines `filename=${VAR}`) and the LU that stands for it:
#              iscsi://HOST[:PORT]/IQN/LUN (PORT defaults to 3260) or iser://HOST[:PORT]/IQN/LUN.
# OPTIONS
#   --set KEY=VALUE  add KEY=VALUE at the end of every job section, so that it wins over the file's own value
#                    (fio's command-line options do NOT: a job file's [global] overrides them). E.g. shorten a
#                    run: --set runtime=2 --set ramp_time=0. Repeatable.
#   --print-job      print the rewritten job file to stderr before running it.
#   -h, --help       this text.
# FIO-ARGS     passed to fio before the job file (e.g. --output-format=json, --output=FILE).
#
# What it does: checks the job file and the URLs; for each VAR the job file uses, checks that something
# listens at HOST:PORT (iscsi:// only), starts `qemu-nbd --fork --persistent --shared=0 --cache=none
# --aio=threads --discard=ignore --detect-zeroes=off --format=raw -k SOCKET URL` on a private UNIX socket
# (the parent returns only once the iSCSI login and LU open have worked; if they fail, qemu-nbd's message is
# shown); writes a copy of the job file in which every `filename=${VAR}` line becomes
# `uri=nbd+unix:///?socket=SOCKET`, every `ioengine=` line becomes `ioengine=nbd` and every job section ends
# with `ioengine=nbd` and the --set lines; runs fio on it; and stops every qemu-nbd it started (also on
# error or Ctrl-C). Exit status: fio's, or 2 for an error of this script (message `fio-run: ERROR: ...`).
#
# Engine override: fio's nbd engine (libnbd, asynchronous) replaces psync/libaio/io_uring. `iodepth` still
# applies: it is the number of NBD requests in flight, and qemu-nbd keeps that many iSCSI commands in flight,
# so a psync job at iodepth=1 stays a queue-depth-1 job. direct=1 is kept (it means nothing to the nbd engine).
# No cache sits in this path: qemu-nbd --cache=none over the iscsi driver sends every request to the target
# (tests/integration/scripts/test_fio_jobs.sh checks that a target-side change is seen by the next fio read).
# Rules for a job file: each job names at most one device, as a line `filename=${VAR}` (the nbd engine takes
# one URI per job: write one job per device, as fio_jobs/all-shards.fio does); no `include`.
#
# Environment (optional):
#   BLOCKPS_FIO          fio to run (default: fio on PATH)
#   BLOCKPS_QEMU_NBD     qemu-nbd to run (default: qemu-nbd on PATH)
#   BLOCKPS_NBD_AIO      qemu-nbd --aio (default threads; native or io_uring only matter for file images)
#   BLOCKPS_NBD_DISCARD  qemu-nbd --discard (default ignore: a trim never reaches a blockps LU)
#   BLOCKPS_FIO_CONNECT_TIMEOUT_S  seconds to wait for HOST:PORT to accept a TCP connection (default 5)
#   TMPDIR               where the sockets, the rewritten job file and qemu-nbd logs live (removed at exit)
set -euo pipefail

blockps_prog=fio-run blockps_die_status=2 blockps_say_stderr=1
# shellcheck source=scripts/lib/messages.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/messages.sh"

FIO=${BLOCKPS_FIO:-fio}
QEMU_NBD=${BLOCKPS_QEMU_NBD:-qemu-nbd}
NBD_AIO=${BLOCKPS_NBD_AIO:-threads}
NBD_DISCARD=${BLOCKPS_NBD_DISCARD:-ignore}
CONNECT_TIMEOUT_S=${BLOCKPS_FIO_CONNECT_TIMEOUT_S:-5}

jobfile=''
print_job=''
sets=()
vars=()
urls=()
fio_args=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help) usage 0 ;;
    --set)
      [ "$#" -ge 2 ] || die "--set needs KEY=VALUE"
      [[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]] || die "--set '$2': expected KEY=VALUE (a fio option)"
      sets+=("$2")
      shift 2
      ;;
    --set=*)
      [[ ${1#--set=} =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]] || die "$1: expected --set KEY=VALUE (a fio option)"
      sets+=("${1#--set=}")
      shift
      ;;
    --print-job) print_job=1; shift ;;
    --)
      shift
      fio_args=("$@")
      break
      ;;
    -*) die "unknown option '$1' (fio's own options go after '--'; --help for usage)" ;;
    *=*)
      var=${1%%=*} url=${1#*=}
      [[ $var =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "'$1': '$var' is not a variable name (expected VAR=URL)"
      for v in "${vars[@]+"${vars[@]}"}"; do
        [ "$v" != "$var" ] || die "$var is given twice"
      done
      vars+=("$var")
      urls+=("$url")
      shift
      ;;
    *)
      [ -z "$jobfile" ] || die "two job files given ('$jobfile' and '$1'); one per run (VAR=URL for devices)"
      jobfile=$1
      shift
      ;;
  esac
done
[ -n "$jobfile" ] || die "no job file given (usage: scripts/fio-run.sh JOBFILE VAR=URL... [-- FIO-ARGS]; --help)"
if [ ! -f "$jobfile" ] || [ ! -r "$jobfile" ]; then die "job file '$jobfile': no such file (or not readable)"; fi
[ "${#vars[@]}" -gt 0 ] || die "no VAR=URL given: map each device variable of $jobfile to an iscsi:// URL"
[[ $CONNECT_TIMEOUT_S =~ ^[1-9][0-9]*$ ]] || die "BLOCKPS_FIO_CONNECT_TIMEOUT_S=$CONNECT_TIMEOUT_S is not a whole number >= 1"
command -v "$FIO" >/dev/null || die "fio not found ($FIO): apt-get install fio"
command -v "$QEMU_NBD" >/dev/null || die "qemu-nbd not found ($QEMU_NBD): apt-get install qemu-utils qemu-block-extra"
"$FIO" --enghelp=nbd >/dev/null 2>&1 || die "$FIO has no nbd engine (fio >= 3.21 built with libnbd)"

# --- check the URLs -------------------------------------------------------------------------------------------
hosts=() ports=() schemes=()
for i in "${!vars[@]}"; do
  url=${urls[$i]}
  if [[ $url =~ ^(iscsi|iser)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:([0-9]+))?/([^/[:space:]]+)/([0-9]+)$ ]]; then
    schemes+=("${BASH_REMATCH[1]}")
    hosts+=("${BASH_REMATCH[2]}")
    port=${BASH_REMATCH[4]:-3260}
    if [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then die "${vars[$i]}=$url: port $port out of range 1..65535"; fi
    ports+=("$port")
    [ "${BASH_REMATCH[6]}" -le 16383 ] || die "${vars[$i]}=$url: LUN ${BASH_REMATCH[6]} out of range 0..16383"
  else
    die "${vars[$i]}=$url: not an LU URL; expected iscsi://HOST[:PORT]/IQN/LUN (or iser://...), e.g. iscsi://127.0.0.1:3261/iqn.2026-11.io.blockps:shard0/1"
  fi
done

# --- read the job file: which variables its filename= lines use -----------------------------------------------
used=()
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  stripped=${line#"${line%%[![:space:]]*}"}
  case "$stripped" in
    '' | '#'* | ';'*) continue ;;
    include*) die "$jobfile:$lineno: 'include' is not supported (one self-contained job file)" ;;
  esac
  if [[ $stripped =~ ^filename[[:space:]]*= ]]; then
    if [[ $stripped =~ ^filename[[:space:]]*=[[:space:]]*\$\{([A-Za-z_][A-Za-z0-9_]*)\}[[:space:]]*$ ]]; then
      var=${BASH_REMATCH[1]}
      found=''
      for v in "${vars[@]}"; do [ "$v" != "$var" ] || found=1; done
      [ -n "$found" ] || die "$jobfile:$lineno uses \${$var}, but no $var=URL was given"
      seen=''
      for v in "${used[@]+"${used[@]}"}"; do [ "$v" != "$var" ] || seen=1; done
      [ -n "$seen" ] || used+=("$var")
    else
      die "$jobfile:$lineno: '$stripped': through the nbd engine each job takes exactly one device, written as filename=\${VAR} (one job per device)"
    fi
  fi
done <"$jobfile"
[ "${#used[@]}" -gt 0 ] || die "$jobfile has no 'filename=\${VAR}' line: nothing to map to an LU"
for v in "${vars[@]}"; do
  seen=''
  for u in "${used[@]}"; do [ "$u" != "$v" ] || seen=1; done
  [ -n "$seen" ] || say "note: $v is not used by $jobfile (ignored)"
done

# --- serve each used variable with a qemu-nbd -----------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/blockps-fio-run-XXXXXX")
pids=()
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  local rc=$? pid n
  trap - EXIT INT TERM
  for pid in "${pids[@]+"${pids[@]}"}"; do
    kill -TERM "$pid" 2>/dev/null || continue
    for n in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      [ "$n" -lt 50 ] || kill -KILL "$pid" 2>/dev/null || true
      sleep 0.1
    done
  done
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

socket_of() { echo "$tmp/$1.sock"; }
for var in "${used[@]}"; do
  for i in "${!vars[@]}"; do [ "${vars[$i]}" = "$var" ] && break; done
  url=${urls[$i]} host=${hosts[$i]} port=${ports[$i]}
  if [ "${schemes[$i]}" = iscsi ]; then
    h=${host#[}
    h=${h%]}
    # shellcheck disable=SC2016 # $1 $2 are the inner shell's arguments
    if ! timeout "$CONNECT_TIMEOUT_S" bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$h" "$port" 2>/dev/null; then
      die "$var=$url: nothing accepts connections at $host:$port (no tgtd there? start the shard: scripts/ps-up.sh)"
    fi
  fi
  sock=$(socket_of "$var")
  log=$tmp/$var.qemu-nbd.log
  if ! "$QEMU_NBD" --fork --persistent --shared=0 --pid-file="$tmp/$var.pid" --socket="$sock" \
    --cache=none --aio="$NBD_AIO" --discard="$NBD_DISCARD" --detect-zeroes=off --format=raw "$url" \
    </dev/null >"$log" 2>&1; then
    die "$var=$url: qemu-nbd could not open the LU: $(tr '\n' ' ' <"$log")"
  fi
  pid=$(cat "$tmp/$var.pid" 2>/dev/null) || die "$var=$url: qemu-nbd wrote no pid file ($(tr '\n' ' ' <"$log"))"
  pids+=("$pid")
  [ -S "$sock" ] || die "$var=$url: qemu-nbd (pid $pid) has no socket $sock"
  say "$var=$url served by qemu-nbd pid $pid on $sock"
done

# --- rewrite the job file -------------------------------------------------------------------------------------
map=()
for var in "${used[@]}"; do map+=("$var=$(socket_of "$var")"); done
# Through the environment, not awk -v (which would turn backslashes in a --set value into escapes).
FIO_RUN_MAPS=$(printf '%s\n' "${map[@]}") FIO_RUN_SETS=$(printf '%s\n' "${sets[@]+"${sets[@]}"}") awk '
  BEGIN {
    maps = ENVIRON["FIO_RUN_MAPS"]; sets = ENVIRON["FIO_RUN_SETS"]
    n = split(maps, m, "\n")
    for (i = 1; i <= n; i++) if (m[i] != "") { eq = index(m[i], "="); sock[substr(m[i], 1, eq - 1)] = substr(m[i], eq + 1) }
    ns = split(sets, s, "\n")
    section = ""
  }
  function close_section() {
    if (section != "" && section != "global") {
      print "; added by scripts/fio-run.sh"
      print "ioengine=nbd"
      for (i = 1; i <= ns; i++) if (s[i] != "") print s[i]
    }
  }
  /^[[:space:]]*\[[^]]+\][[:space:]]*$/ {
    close_section()
    section = $0; gsub(/^[[:space:]]*\[|\][[:space:]]*$/, "", section)
    print; next
  }
  /^[[:space:]]*filename[[:space:]]*=/ {
    v = $0; sub(/^[^{]*\{/, "", v); sub(/\}.*$/, "", v)
    print "; scripts/fio-run.sh: was " $0
    print "uri=nbd+unix:///?socket=" sock[v]
    next
  }
  /^[[:space:]]*ioengine[[:space:]]*=/ { print "; scripts/fio-run.sh: was " $0; print "ioengine=nbd"; next }
  { print }
  END { close_section() }
' "$jobfile" >"$tmp/job.fio"
if [ -n "$print_job" ]; then
  say "rewritten job file:"
  sed 's/^/    /' "$tmp/job.fio" >&2
fi

say "running: $FIO ${fio_args[*]+${fio_args[*]} }$jobfile (nbd engine)"
rc=0
"$FIO" "${fio_args[@]+"${fio_args[@]}"}" "$tmp/job.fio" || rc=$?
[ "$rc" -eq 0 ] || say "fio exited with status $rc"
exit "$rc"
