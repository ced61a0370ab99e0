#!/usr/bin/env bash
# The chaos run: real training on an emulated cluster while faults come one after another.
#
#   tests/soak/run.sh [--minutes 5] [--seed N] [--fault-every 30] [--rate 100mbit] [--min-accuracy 0.80]
#                     [--stall-limit 150] [--faults LIST] [--prefix soak] [--build-dir DIR] [--keep]
#
# The cluster (bench/lib/emulated_hosts.sh): worker hosts w0 and w1 and shard hosts s0 and s1, network namespaces on
# one switch, every link shaped to --rate each way. Four jobs train Fashion-MNIST's MLP (client/examples/train.py)
# side by side, each on two shards of its own (one on s0, one on s1), started as a user starts them
# (scripts/ps-up.sh in the shard host; a tgtd per shard). Three run as torchrun on both worker hosts (one rank per
# host, --max-restarts, rendezvous on w0) with --resume (a restarted job goes on from its last evaluation):
#   sync   DistributedOptimizer, the shards run the optimizer, mode=sync (workers=2, min_workers=1)
#   async  DistributedOptimizer, mode=async
#   hook   DDP with the blockps communication hook, the shards average (opt=average, mode=sync), the optimizer in
#          the ranks
# and one is elastic (docs/DEPLOY.md, "Elastic jobs"):
#   elastic  DistributedOptimizer(elastic=True) (train.py --elastic 2), mode=sync (workers=1, max_workers=4): each
#          of its hosts e1, e2, ... is a torchrun of its own (one rank, its own rendezvous) in a worker host's namespace,
#          named by BLOCKPS_HOST; the shards are their only meeting point. e1 and e2 start it (on w0 and w1).
# The optimizer shards checkpoint every 5 s and copy each checkpoint off the host (checkpoint_copy= into the work
# directory's offhost/, standing for other storage); the averaging shards keep nothing.
# From --seed (printed; default: a random one), every --fault-every seconds the driver does one fault, its kinds in
# a shuffled order that repeats (each kind once per round; --faults chooses the kinds):
#   shard-kill   kill -9 of a random shard's tgtd; 1 s later ps-up starts it again from its checkpoint (what the
#                systemd unit does: Restart=always, RestartSec=1)
#   worker-kill  kill -9 of a random rank; torchrun restarts the job's ranks, which resume
#   worker-stop  SIGSTOP of a random rank for the sync shards' worker_timeout_ms + 2 s, then SIGCONT
#   link-down    a random host's link down for 2-8 s
#   link-slow    a random host's link at 1/20 of --rate for 5-15 s: congested, with up to 100 ms of queueing delay
#                and drops beyond it (this kernel has no netem: ENVIRONMENT.md)
#   host-lost    a shard host lost with its disk: its namespace (its tgtds) and its directory removed; a
#                replacement with the same address starts the optimizer shards from their off-host copies and the
#                averaging shard empty (docs/DEPLOY.md, "Losing a shard host")
#   host-preempt an elastic host told to go: SIGTERM to its torchrun, which passes it on; the rank finishes its step,
#                leaves the shards and exits 0 (a host that has not left within 60 s fails the fault)
#   host-kill    an elastic host killed without notice: kill -9 of its torchrun and its rank
#   host-join    a new elastic host (the next name, on a random worker host) joins the running job; it must take the
#                shards' weights and step within 120 s
#                (host-preempt and host-kill start a new host first when only one is live, so the job never ends)
# After --minutes the faults stop; the jobs end at their next evaluation (train.py --stop-file). Then it checks and
# prints a table per fault kind (tests/soak/chaos_report.py):
#   - every fault recovered: each job it touched completed a step within --stall-limit s of the fault's end (the
#     elastic hosts that stay: a preempted or killed one does not come back);
#   - nobody waited for an elastic host that came or went: around each host-* fault (from 2 s before it to 10 s
#     after it) every other live elastic host's longest gap between two steps is at most 2 s beyond its median step;
#   - no step stalled: no job went --stall-limit s without completing a step;
#   - each shard kill and host loss lost at most the updates since the shard's last checkpoint (from the status
#     page's /model/block_steps and /checkpoint/block_steps before the fault and after the restart);
#   - no push applied twice: the updates each optimizer shard applied (summed over its lives) are at most the pushes
#     the ranks sent it (their steps, from train.py --timeline, one more per life of a rank);
#   - every job's final test accuracy is at least --min-accuracy;
#   - nothing left running (namespaces, tgtd, torchrun, ranks) once it cleaned up.
# A failure prints the seed and the fault sequence to replay it (--seed N with the same --minutes and --fault-every).
# Options (a wrong value: `soak: ERROR: ...`, exit 2):
#   --minutes M       minutes of faults, 1..1440 (default 5)
#   --seed N          0..2147483647 (default: random)
#   --fault-every K   seconds between the starts of two faults, 10..3600 (default 30)
#   --rate R          every link, each direction: tc rate (kbit, mbit, gbit; default 100mbit)
#   --min-accuracy A  a fraction in [0, 1] (default 0.80; the MLP reaches about 0.85 in one epoch)
#   --stall-limit S   seconds, 30..3600 (default 150)
#   --faults LIST     comma-separated kinds from the list above (default: all)
#   --prefix P        namespace names (P-sw, P-w0, ...), a lowercase letter and up to 7 more letters or digits
#                     (default soak); refused when such namespaces exist
#   --build-dir DIR   the build (default ./build)
#   --keep            keep the work directory (logs, status pages, timelines)
# Needs: root, iproute2 with tbf, /usr/bin/python3 with torch (python3-torch), tgt, a build with the Python package.
# Exit 0: every check passed; 1: a check failed or the run broke (its logs are printed); 2: a wrong option or a
# missing prerequisite.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
blockps_prog=soak
blockps_die_status=2
# shellcheck source=scripts/lib/messages.sh
. "$repo/scripts/lib/messages.sh"
# shellcheck source=bench/lib/emulated_hosts.sh
. "$repo/bench/lib/emulated_hosts.sh"

minutes=5 seed="" fault_every=30 rate=100mbit min_accuracy=0.80 stall_limit=150 prefix=soak build_dir=$repo/build keep=""
all_faults=(shard-kill worker-kill worker-stop link-down link-slow host-lost host-preempt host-kill host-join)
fault_list=$(IFS=,; echo "${all_faults[*]}")
mtu=1500
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) usage 0 ;;
    --keep) keep=1; shift; continue ;;
    --minutes | --seed | --fault-every | --rate | --min-accuracy | --stall-limit | --faults | --prefix | --build-dir)
      [ $# -ge 2 ] || die "$1 needs a value (--help)" ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
  case $1 in
    --minutes) minutes=$2 ;;
    --seed) seed=$2 ;;
    --fault-every) fault_every=$2 ;;
    --rate) rate=$2 ;;
    --min-accuracy) min_accuracy=$2 ;;
    --stall-limit) stall_limit=$2 ;;
    --faults) fault_list=$2 ;;
    --prefix) prefix=$2 ;;
    --build-dir) build_dir=$2 ;;
  esac
  shift 2
done
in_range() { # NAME VALUE LOW HIGH
  if ! [[ $2 =~ ^[0-9]+$ ]] || [ "$2" -lt "$3" ] || [ "$2" -gt "$4" ]; then die "$1 '$2': must be a whole number in $3..$4"; fi
}
in_range --minutes "$minutes" 1 1440
[ -z "$seed" ] || in_range --seed "$seed" 0 2147483647
in_range --fault-every "$fault_every" 10 3600
in_range --stall-limit "$stall_limit" 30 3600
rate_bps=$(bits_per_second_of "$rate") || die "--rate '$rate': must be a whole number with kbit, mbit or gbit (e.g. 100mbit)"
[ "$rate_bps" -ge 1000000 ] || die "--rate '$rate': must be at least 1mbit (the jobs would not train)"
[[ $min_accuracy =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || die "--min-accuracy '$min_accuracy': must be a fraction in [0, 1]"
[[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--prefix '$prefix': must be a lowercase letter and up to 7 more letters or digits"
IFS=, read -ra faults <<<"$fault_list"
[ "${#faults[@]}" -gt 0 ] || die "--faults is empty: give one or more of ${all_faults[*]}"
for kind in "${faults[@]}"; do
  [[ " ${all_faults[*]} " == *" $kind "* ]] || die "--faults: unknown kind '$kind' (${all_faults[*]})"
done
[ "$(printf '%s\n' "${faults[@]}" | sort | uniq -d)" = "" ] || die "--faults '$fault_list': a kind is named twice"
seed=${seed:-$((RANDOM * 32768 + RANDOM))}

[ "$(id -u)" = 0 ] || die "run as root (it creates network namespaces and starts tgtd)"
command -v tc >/dev/null || die "tc not found: install iproute2 (scripts/setup.sh installs everything)"
python=/usr/bin/python3
torchrun=$(command -v torchrun || true)
[ -n "$torchrun" ] || die "torchrun not found: install python3-torch (scripts/setup.sh)"
"$python" -c 'import torch.distributed' 2>/dev/null || die "$python cannot import torch.distributed: install python3-torch"
build_dir=$(realpath -m "$build_dir")
cli=$build_dir/client/cli/blockps
module_dir=$build_dir/tgt-modules
[ -x "$cli" ] || die "$cli not found: build first (cmake -S . -B build && cmake --build build), or give --build-dir"
[ -f "$module_dir/bs_blockps.so" ] || die "$module_dir/bs_blockps.so not found: build first, or give --build-dir"
[ -f "$build_dir/python/blockps/__init__.py" ] || die "$build_dir/python/blockps not built (pybind11-dev; cmake --build)"
if ip netns list | awk '{print $1}' | grep -q "^$prefix-"; then
  die "network namespaces named $prefix-* exist already: another chaos run, or one killed with SIGKILL (ip netns del them), or use --prefix"
fi

# --- the cluster ---------------------------------------------------------------------------------------------------
jobs=(sync async hook elastic)
torchrun_jobs=(sync async hook)  # the worker-* faults' jobs; the elastic job has its host-* faults
shard_hosts=(s0 s1)
worker_timeout_ms=5000
block_bytes=$((256 << 10))
read -r model_bytes optimizer_bsopts < <(PYTHONPATH=$build_dir/python "$python" "$repo/client/examples/fashion_mnist.py" \
  shard-setup --model mlp --block "$block_bytes" --shards 2) || true
[ -n "${optimizer_bsopts:-}" ] || die "could not lay out the mlp model (fashion_mnist.py shard-setup)"
shard_bytes=$((model_bytes / 2))
work=$(mktemp -d /tmp/blockps-soak.XXXXXX)
mkdir -p "$work/offhost" "$work/status" "$work/timeline" "$work/logs" "$work/conf"
agents=()  # the torchrun agents: JOB-HOST:PID (their logs: $work/logs/JOB-HOST.log)
sampler=""
# shellcheck disable=SC2317  # reached through the trap
cleanup() {
  local rc=$? entry left
  trap - EXIT INT TERM
  [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true
  for entry in "${agents[@]+"${agents[@]}"}"; do kill -9 "${entry##*:}" 2>/dev/null || true; done
  pkill -9 -f "$work/" 2>/dev/null || true  # the ranks (their arguments name the work directory)
  for host in "${shard_hosts[@]}"; do
    [ -d "$work/hosts/$host/state" ] || continue
    BLOCKPS_STATE_DIR=$work/hosts/$host/state "$repo/scripts/ps-down.sh" >>"$work/logs/ps-down.log" 2>&1 || true
  done
  hosts_remove_all
  rm -rf "/etc/netns/$prefix-w0" "/etc/netns/$prefix-w1"
  sleep 1
  left=$(pgrep -af "$work/" || true)
  left+=$(ip netns list | awk '{print $1}' | grep "^$prefix-" || true)
  if [ -n "$left" ]; then
    echo "soak: CHECK FAILED: left running after the clean-up: $left" >&2
    rc=1
  elif [ "$rc" -ne 2 ]; then
    echo "soak: nothing left running (no namespace, tgtd, torchrun or rank of this run): ok"
  fi
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; then
    echo "soak: to replay: tests/soak/run.sh --seed $seed --minutes $minutes --fault-every $fault_every --rate $rate --faults $fault_list" >&2
    [ -s "$work/faults.tsv" ] && { echo "soak: the fault sequence:" >&2; cut -f1,2,4- "$work/faults.tsv" | sed 's/^/soak:   /' >&2; }
  fi
  if [ -n "$keep" ]; then say "kept the work directory $work"; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'warn "interrupted"; exit 130' INT
trap 'warn "terminated"; exit 143' TERM

worker_address() { echo "10.215.0.$((10 + ${1#w}))"; }
shard_address() { echo "10.215.0.$((100 + ${1#s}))"; }
job_index() { local j; for j in "${!jobs[@]}"; do [ "${jobs[$j]}" != "$1" ] || echo "$j"; done; }
shard_name() { echo "$1-$2"; }  # JOB HOST: the shard of JOB on shard host HOST (its conf, state and status name)
shard_port() { echo $((3261 + $(job_index "$1"))); }
# Control numbers name tgtd's unix sockets, which all namespaces share: unique on the machine.
shard_control() { echo $((800 + 10 * $(job_index "$1") + ${2#s})); }
job_bsopts() {
  local common="size=$shard_bytes;dtype=f32;block=256K;worker_timeout_ms=$worker_timeout_ms"
  case $1 in
    sync) echo "$common;$optimizer_bsopts;init=zeros;seed=1;checkpoint_s=5;mode=sync;workers=2;min_workers=1;straggler_ms=5000" ;;
    async) echo "$common;$optimizer_bsopts;init=zeros;seed=1;checkpoint_s=5;mode=async" ;;
    hook) echo "$common;opt=average;checkpoint_s=0;mode=sync;workers=2;min_workers=1;straggler_ms=5000" ;;
    # straggler_ms=1500: a round waits at most that long for a host that joined (docs/DEPLOY.md, "Elastic jobs"),
    # beyond an evaluation's 1.2 s here.
    elastic) echo "$common;$optimizer_bsopts;init=zeros;seed=1;checkpoint_s=5;mode=sync;workers=1;max_workers=4;min_workers=1;straggler_ms=1500" ;;
  esac
}
is_optimizer_job() { [ "$1" != hook ]; }
# write_confs: every shard's conf (ps-up's format) and every job's cluster file, and one cluster file per shard (the
# status sampler reads each shard alone, so that a dead one does not hide the others).
write_confs() {
  local job host name copy
  for job in "${jobs[@]}"; do
    {
      printf '[model]\nsize = %s\ndtype = "f32"\nblock = "256K"\n' "$model_bytes"
      for host in "${shard_hosts[@]}"; do
        url="iscsi://$(shard_address "$host"):$(shard_port "$job")/iqn.2026-11.io.blockps:soak-$(shard_name "$job" "$host")"
        printf '\n[[shard]]\nname = "%s"\ngrad = "%s/1"\nweights = "%s/2"\nstatus = "%s/3"\n' "$(shard_name "$job" "$host")" "$url" "$url" "$url"
        printf '[model]\nsize = %s\ndtype = "f32"\nblock = "256K"\n\n[[shard]]\nname = "%s"\ngrad = "%s/1"\nweights = "%s/2"\nstatus = "%s/3"\n' \
          "$shard_bytes" "$(shard_name "$job" "$host")" "$url" "$url" "$url" >"$work/conf/$(shard_name "$job" "$host").toml"
      done
    } >"$work/conf/$job.toml"
    for host in "${shard_hosts[@]}"; do
      name=$(shard_name "$job" "$host") copy=""
      if is_optimizer_job "$job"; then copy=";checkpoint_copy=$work/offhost/$name.ckpt"; fi
      {
        echo "blockps-control $(shard_control "$job" "$host")"
        echo "blockps-portal $(shard_address "$host"):$(shard_port "$job")"
        echo "blockps-nop-in 5 3"  # as docs/DEPLOY.md: a dead host's session is dropped within 15 s
        echo "<target iqn.2026-11.io.blockps:soak-$name>"
        printf '    %s\n' "MaxRecvDataSegmentLength 262144" "MaxXmitDataSegmentLength 262144" "MaxBurstLength 16776192" \
          "FirstBurstLength 16776192" "InitialR2T No" "ImmediateData Yes" "initiator-address ALL" "allow-in-use yes"
        echo "    blockps-shard $work/hosts/$host/disk/$name.ckpt '$(job_bsopts "$job")$copy'"
        echo "</target>"
      } >"$work/conf/$name.conf"
    done
  done
}
# start_shard JOB HOST: ps-up in the shard host, its state and checkpoint on the host's "disk".
start_shard() {
  local name
  name=$(shard_name "$1" "$2")
  mkdir -p "$work/hosts/$2/disk" "$work/hosts/$2/state"
  in_host "$2" env BLOCKPS_STATE_DIR="$work/hosts/$2/state" BLOCKPS_BACKING_STORE_DIR="$module_dir" \
    "$repo/scripts/ps-up.sh" "$work/conf/$name.conf" >>"$work/logs/ps-up-$name.log" 2>&1
}
shard_pid() { cat "$work/hosts/$2/state/$(shard_name "$1" "$2")/pid" 2>/dev/null; }
# read_status JOB HOST EVENT: the shard's status page as one JSON line into $work/status/JOB-HOST.jsonl, tagged with
# the wall clock and EVENT (sample, before, after); fails when the page cannot be read.
read_status() {
  local name page
  name=$(shard_name "$1" "$2")
  page=$(in_host w0 timeout 20 "$cli" -c "$work/conf/$name.toml" status --json 2>>"$work/logs/status-$name.log") || return 1
  printf '{"unix": %s, "event": "%s", "status": %s}\n' "$EPOCHREALTIME" "$3" "$(tr -d '\n' <<<"$page")" >>"$work/status/$name.jsonl"
}
# read_status_after_restart JOB HOST: the page of a shard just started again (what it loaded), tried for up to 30 s.
read_status_after_restart() {
  local tries
  for tries in 3 2 1; do
    read_status "$1" "$2" after && return 0
    [ "$tries" -gt 1 ] || break
    sleep 5
  done
  warn "could not read $(shard_name "$1" "$2")'s page after its restart (log: $work/logs/status-$(shard_name "$1" "$2").log)"
}
status_sampler() {
  local job host
  while :; do
    for job in "${jobs[@]}"; do
      is_optimizer_job "$job" || continue
      for host in "${shard_hosts[@]}"; do read_status "$job" "$host" sample || true; done
    done
    sleep 2
  done
}

hosts_start_switch
for host in w0 w1; do
  hosts_add "$host" "$(worker_address "$host")"
  mkdir -p "/etc/netns/$prefix-$host"
  printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "$(worker_address w0)" "$prefix-w0" "$(worker_address w1)" "$prefix-w1" \
    >"/etc/netns/$prefix-$host/hosts"
done
for host in "${shard_hosts[@]}"; do hosts_add "$host" "$(shard_address "$host")"; done
say "seed $seed; $minutes min of faults, one every $fault_every s (${faults[*]}); links $rate; jobs ${jobs[*]}, mlp ($model_bytes bytes on 2 shards each); work directory $work"
say "machine: $(nproc) cores, $(uname -r), $(date -u '+%Y-%m-%d %H:%M UTC')"
write_confs
for job in "${jobs[@]}"; do
  for host in "${shard_hosts[@]}"; do
    start_shard "$job" "$host" || { cat "$work/logs/ps-up-$(shard_name "$job" "$host").log" >&2; die "shard $(shard_name "$job" "$host") did not start"; }
  done
done

# --- the jobs ------------------------------------------------------------------------------------------------------
# The wall clock minus the monotonic one (train.py's timeline is on CLOCK_MONOTONIC): the report converts.
"$python" -c 'import time; print(f"{time.time() - time.monotonic():.6f}")' >"$work/clock-offset"
start_job() { # JOB: torchrun on both worker hosts
  local job=$1 host how port
  case $job in
    hook) how=(--ddp-blockps "$work/conf/$job.toml") ;;
    *) how=(--ps "$work/conf/$job.toml") ;;
  esac
  port=$((29400 + $(job_index "$job")))
  # The rendezvous store lives in w0's agent: torchrun's own guess compares the endpoint with the machine's hostname,
  # which every namespace shares. Each worker host has a hostname of its own (a UTS namespace), which its
  # /etc/hosts (ip netns exec mounts /etc/netns/NS/hosts there) resolves to its address: torchrun gives the ranks
  # group rank 0's hostname as MASTER_ADDR.
  for host in w0 w1; do
    # Not through in_host: $! must be torchrun itself (ip netns exec, unshare, sh and env exec it), whose child is
    # the rank.
    # shellcheck disable=SC2016  # the inner shell expands $0 and $@
    ip netns exec "$prefix-$host" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$prefix-$host" env PYTHONPATH="$build_dir/python" OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 BLOCKPS_HOST="$host" \
      "$torchrun" --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint "$(worker_address w0):$port" \
      --rdzv_id "soak-$job" --rdzv_conf "is_host=$([ "$host" = w0 ] && echo 1 || echo 0)" --max_restarts 1000 --monitor_interval 1 --redirects 1 --tee 1 \
      "$repo/client/examples/train.py" "${how[@]}" --model mlp --epochs 1000 --evals-per-epoch 8 --name "$job" \
      --resume "$work/$job.resume" --stop-file "$work/stop" --out "$work/$job.json" \
      --timeline "$work/timeline/$job-r{rank}.$host.{pid}" >"$work/logs/$job-$host.log" 2>&1 &
    agents+=("$job-$host:$!")
  done
}
for job in "${torchrun_jobs[@]}"; do start_job "$job"; done
# The elastic job's hosts: each a torchrun of its own (one rank, restarted as any torchrun restarts its
# ranks) in a worker host's namespace; its name (BLOCKPS_HOST) makes its iSCSI name and its stream of batches.
elastic_next=1
departed=""  # the elastic hosts preempted or killed: " elastic-eN ..." (their torchrun is gone, on purpose)
# start_elastic_host WORKER_HOST: the next elastic host; its name in $joined.
start_elastic_host() {
  joined=e$elastic_next
  elastic_next=$((elastic_next + 1))
  # Its own rendezvous port (--standalone's fixed 29400 would be another host's store in the same namespace).
  ip netns exec "$prefix-$1" env PYTHONPATH="$build_dir/python" OMP_NUM_THREADS=1 BLOCKPS_HOST="$joined" BLOCKPS_JOB=soak-elastic \
    "$torchrun" --nnodes 1 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$((29500 + elastic_next))" \
    --rdzv_id "soak-elastic-$joined" --rdzv_conf is_host=1 --max_restarts 1000 --monitor_interval 1 --redirects 1 --tee 1 \
    "$repo/client/examples/train.py" --ps "$work/conf/elastic.toml" --elastic 2 --model mlp --epochs 1000 --evals-per-epoch 8 \
    --name elastic --stop-file "$work/stop" --out "$work/elastic-$joined.json" \
    --timeline "$work/timeline/elastic-r{rank}.$joined.{pid}" >"$work/logs/elastic-$joined.log" 2>&1 &
  agents+=("elastic-$joined:$!")
}
start_elastic_host w0
start_elastic_host w1
# elastic_live: the names of the elastic hosts started and not preempted or killed.
elastic_live() {
  local entry
  for entry in "${agents[@]}"; do
    [[ ${entry%:*} == elastic-* ]] || continue
    [[ " $departed " == *" ${entry%:*} "* ]] || echo "${entry%%:*}"
  done | sed 's/^elastic-//'
}
agent_pid() { local entry; for entry in "${agents[@]}"; do [ "${entry%:*}" != "$1" ] || echo "${entry##*:}"; done; }
# rank_pid JOB HOST: the job's rank on HOST now (the agent's child running train.py), or nothing.
rank_pid() {
  local entry
  for entry in "${agents[@]}"; do
    [ "${entry%:*}" = "$1-$2" ] || continue
    pgrep -P "${entry##*:}" -f train.py | head -1
  done
}
# wait_for_training TIMEOUT: until every job's rank 0 has printed an evaluation (all train), or fail.
wait_for_training() {
  local deadline=$((SECONDS + $1)) job entry log
  for job in "${jobs[@]}"; do
    log=$work/logs/$job-w0.log
    [ "$job" != elastic ] || log=$work/logs/elastic-e1.log
    until grep -q "test acc" "$log" 2>/dev/null; do
      for entry in "${agents[@]}"; do
        kill -0 "${entry##*:}" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ] && continue
        tail -n 30 "$work/logs/${entry%:*}.log" >&2
        echo "soak: FAILED: job $job did not reach its first evaluation (torchrun of ${entry%:*} ended, or $1 s passed)" >&2
        exit 1
      done
      sleep 2
    done
  done
}
wait_for_training 300
say "all jobs train; faults start"
status_sampler &
sampler=$!

# --- the faults ----------------------------------------------------------------------------------------------------
RANDOM=$seed
# pick VAR ARRAY: VAR := a random item of ARRAY (not in a command substitution: a subshell's RANDOM would not advance
# this shell's sequence, and every pick would repeat the last).
# shellcheck disable=SC2034  # into is the caller's variable
pick() { local -n into=$1 from=$2; into=${from[RANDOM % ${#from[@]}]}; }
# fault_log KIND TARGET START END DETAIL: one line of $work/faults.tsv (wall clock seconds).
fault_log() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$work/faults.tsv"; }
# wait_for_join NAME: until the new elastic host NAME took the shards' weights and logged a step (120 s at most).
wait_for_join() {
  local tries
  for tries in $(seq 240); do
    grep -qs "at the job's step" "$work/logs/elastic-$1.log" &&
      grep -qs '"name": "step"' "$work/timeline/elastic-r0.$1."*.loop.json && return 0
    sleep 0.5
  done
  warn "elastic host $1 did not join within 120 s:"
  tail -5 "$work/logs/elastic-$1.log" >&2
  return 1
}
restart_shard() { # JOB HOST: as the unit does (RestartSec=1)
  sleep 1
  start_shard "$1" "$2" || { warn "shard $(shard_name "$1" "$2") did not start again:"; tail -5 "$work/logs/ps-up-$(shard_name "$1" "$2").log" >&2; return 1; }
}
do_fault() { # KIND
  local kind=$1 t0 job host pid seconds name optimizer_jobs=(sync async elastic)
  # shellcheck disable=SC2034  # picked from through pick's nameref
  local worker_hosts=(w0 w1) all_hosts=(w0 w1 s0 s1)
  t0=$EPOCHREALTIME
  case $kind in
    shard-kill)
      pick job jobs
      pick host shard_hosts
      if is_optimizer_job "$job"; then read_status "$job" "$host" before || warn "could not read $job-$host's page"; fi
      pid=$(shard_pid "$job" "$host")
      kill -9 "$pid"
      restart_shard "$job" "$host" || { fault_log "$kind" "$(shard_name "$job" "$host")" "$t0" "$EPOCHREALTIME" "not restarted"; return 1; }
      if is_optimizer_job "$job"; then read_status_after_restart "$job" "$host"; fi
      fault_log "$kind" "$(shard_name "$job" "$host")" "$t0" "$EPOCHREALTIME" "tgtd $pid"
      ;;
    worker-kill | worker-stop)
      pick job torchrun_jobs
      pick host worker_hosts
      pid=$(rank_pid "$job" "$host")
      if [ -z "$pid" ]; then fault_log "$kind" "$job@$host" "$t0" "$EPOCHREALTIME" "no rank running (restarting)"; return 0; fi
      if [ "$kind" = worker-kill ]; then
        kill -9 "$pid"
      else
        seconds=$((worker_timeout_ms / 1000 + 2))
        kill -STOP "$pid"
        sleep "$seconds"
        kill -CONT "$pid" 2>/dev/null || true
      fi
      fault_log "$kind" "$job@$host" "$t0" "$EPOCHREALTIME" "rank pid $pid"
      ;;
    link-down)
      pick host all_hosts
      seconds=$((2 + RANDOM % 7))
      ip -n "$prefix-$host" link set eth0 down
      sleep "$seconds"
      ip -n "$prefix-$host" link set eth0 up
      fault_log "$kind" "$host" "$t0" "$EPOCHREALTIME" "${seconds}s"
      ;;
    link-slow)
      pick host all_hosts
      seconds=$((5 + RANDOM % 11))
      hosts_shape_link "$host" "$((rate_bps / 20 / 1000))kbit"
      sleep "$seconds"
      hosts_shape_link "$host" "$rate"
      fault_log "$kind" "$host" "$t0" "$EPOCHREALTIME" "${seconds}s at $((rate_bps / 20 / 1000))kbit"
      ;;
    host-preempt | host-kill)
      local live detail=""
      mapfile -t live < <(elastic_live)
      if [ "${#live[@]}" -lt 2 ]; then  # the job must go on: a host joins first
        pick host worker_hosts
        start_elastic_host "$host"
        wait_for_join "$joined" || { fault_log "$kind" "elastic@$joined" "$t0" "$EPOCHREALTIME" "not joined"; return 1; }
        detail="$joined joined first; "
        mapfile -t live < <(elastic_live)
      fi
      pick name live
      pid=$(agent_pid "elastic-$name")
      departed+=" elastic-$name"
      if [ "$kind" = host-kill ]; then
        pkill -9 -P "$pid" 2>/dev/null || true
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true  # reaped here: bash's "Killed" notice goes nowhere
        fault_log "$kind" "elastic@$name" "$t0" "$EPOCHREALTIME" "${detail}torchrun $pid and its rank killed"
        return 0
      fi
      kill -TERM "$pid"
      for seconds in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      if kill -0 "$pid" 2>/dev/null || ! grep -q "preempted: host $name left" "$work/logs/elastic-$name.log"; then
        fault_log "$kind" "elastic@$name" "$t0" "$EPOCHREALTIME" "${detail}did not leave cleanly within 60 s"
        return 1
      fi
      fault_log "$kind" "elastic@$name" "$t0" "$EPOCHREALTIME" "${detail}left after its step (torchrun $pid)"
      ;;
    host-join)
      pick host worker_hosts
      start_elastic_host "$host"
      wait_for_join "$joined" || { fault_log "$kind" "elastic@$joined" "$t0" "$EPOCHREALTIME" "not joined"; return 1; }
      fault_log "$kind" "elastic@$joined" "$t0" "$EPOCHREALTIME" "on $host: $(grep -o "at the job's step [0-9]*" "$work/logs/elastic-$joined.log" | head -1)"
      ;;
    host-lost)
      pick host shard_hosts
      for job in "${optimizer_jobs[@]}"; do read_status "$job" "$host" before || true; done
      hosts_remove "$host"
      rm -rf "$work/hosts/$host"
      sleep 2
      hosts_add "$host" "$(shard_address "$host")"
      hosts_announce "$host" "$(worker_address w0)" "$(worker_address w1)"  # the new MAC (docs/DEPLOY.md)
      mkdir -p "$work/hosts/$host/disk"
      for job in "${jobs[@]}"; do
        name=$(shard_name "$job" "$host")
        # The replacement's checkpoint: the off-host copy (optimizer shards); none for the averaging shard.
        if is_optimizer_job "$job" && ! cp "$work/offhost/$name.ckpt" "$work/hosts/$host/disk/$name.ckpt"; then
          fault_log "$kind" "$host" "$t0" "$EPOCHREALTIME" "$name not restarted: no off-host copy of its checkpoint"
          return 1
        fi
        start_shard "$job" "$host" || { fault_log "$kind" "$host" "$t0" "$EPOCHREALTIME" "$name not started"; return 1; }
      done
      for job in "${optimizer_jobs[@]}"; do read_status_after_restart "$job" "$host"; done
      fault_log "$kind" "$host" "$t0" "$EPOCHREALTIME" "replaced"
      ;;
  esac
}
shard_deaths() { # the shards that died without a fault (a crash): their names
  local job host pid
  for job in "${jobs[@]}"; do
    for host in "${shard_hosts[@]}"; do
      pid=$(shard_pid "$job" "$host")
      if [ -z "$pid" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != tgtd ]; then shard_name "$job" "$host"; fi
    done
  done
}
end=$((SECONDS + minutes * 60))
order=()
broken=""
while [ "$SECONDS" -lt "$end" ]; do
  next=$((SECONDS + fault_every))
  if [ "${#order[@]}" -eq 0 ]; then
    # A new round: every kind once, shuffled (Fisher-Yates on the seeded RANDOM).
    order=("${faults[@]}")
    for ((i = ${#order[@]} - 1; i > 0; i--)); do j=$((RANDOM % (i + 1))); tmp=${order[$i]}; order[i]=${order[$j]}; order[j]=$tmp; done
  fi
  kind=${order[0]}
  order=("${order[@]:1}")
  say "$(date -u +%H:%M:%S) fault: $kind"
  do_fault "$kind" || { broken="fault $kind could not be recovered from (its line in the table)"; break; }
  dead=$(shard_deaths)
  [ -z "$dead" ] || { broken="shard(s) died without a fault: $dead"; break; }
  while [ "$SECONDS" -lt "$next" ] && [ "$SECONDS" -lt "$end" ]; do sleep 1; done
done

# --- the end -------------------------------------------------------------------------------------------------------
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sampler=""
say "faults over; the jobs end at their next evaluation"
touch "$work/stop"
deadline=$((SECONDS + stall_limit + 120))
for entry in "${agents[@]}"; do
  [[ " $departed " != *" ${entry%:*} "* ]] || continue  # preempted or killed on purpose
  pid=${entry##*:}
  while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then broken="${broken:+$broken; }torchrun of ${entry%:*} did not end"; elif ! wait "$pid"; then
    broken="${broken:+$broken; }torchrun of ${entry%:*} failed (the tail of its log follows)"
    tail -20 "$work/logs/${entry%:*}.log" | sed 's/^/soak:   /' >&2 || true
  fi
done
for job in sync async elastic; do for host in "${shard_hosts[@]}"; do read_status "$job" "$host" final || true; done; done
for job in "${torchrun_jobs[@]}"; do grep "test acc" "$work/logs/$job-w0.log" | tail -1 | sed "s/^/soak: $job, last evaluation: /" || true; done
for name in $(elastic_live); do grep "test acc" "$work/logs/elastic-$name.log" | tail -1 | sed "s/^/soak: elastic host $name, last evaluation: /" || true; done
report_args=(--work "$work" --jobs "$(IFS=,; echo "${jobs[*]}")" --stall-limit "$stall_limit" --min-accuracy "$min_accuracy"
  --seed "$seed" --shard-hosts "$(IFS=,; echo "${shard_hosts[*]}")")
[ -z "$broken" ] || report_args+=(--broken "$broken")
report_status=0
"$python" "$repo/tests/soak/chaos_report.py" "${report_args[@]}" >"$work/report.txt" || report_status=$?
sed 's/^/soak: /' "$work/report.txt"
exit "$report_status"
