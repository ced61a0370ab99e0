#!/usr/bin/env bash
# bench/cluster cannot rot: its --help, its refusals, a tiny real run (2 workers, 2 dedicated shard hosts, a
# 4M model on 100 Mbit/s links, async) that must print every figure (iperf3 both ways, step, exchange, gloo) and
# leave no namespace, tgtd or work directory behind, 2 hosts x 2 ranks in sync mode (every rank a worker, and the
# host path: its rows, ideals 2:1, and M each way per step through each worker host's link, from the counters),
# the same in both modes in one run with --timeline (rows per
# mode, sync/async, every worker's command trace, link samples, the report and its figure), and a tiny training workload (--workload train: the MLP for
# 0.05 epochs over DDP and sync shards) that must report both runs against the link bound, with its timeline (each
# run's phases against the links) and the CPU per byte of every side. Not timed: the figures are checked for presence and sanity
# (a step cannot beat its ideal at the nominal rate by more than the measurement's noise), not for speed.
# Skipped (77) without root, iperf3, tc's tbf or python3-torch, said loudly.
#   test_bench_cluster.sh --repo REPO --build-dir BUILD
set -euo pipefail
# shellcheck source=tests/integration/shell_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_lib.sh"
build=''
while [ "$#" -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    *) parse_test_args "$1" "$2"; shift 2 ;;
  esac
done
if [ -z "$repo" ] || [ -z "$build" ]; then echo "usage: $0 --repo REPO --build-dir BUILD" >&2; exit 2; fi
cluster=$repo/bench/cluster
prefix=bpct$((RANDOM % 1000))
tmp=$(mktemp -d /tmp/blockps-test-cluster.XXXXXX)
export BLOCKPS_CONTROL_OFFSET=31600 BLOCKPS_STATE_DIR=$tmp/state  # the state directory: only for shell_lib's failure dump
trap 'finish_test $? "$tmp"' EXIT

step "--help names every option"
"$cluster" --help >"$tmp/help" || fail "--help exited $?"
for option in --workers --ranks-per-host --host-aggregation --shards --placement --model-size --mode --rate --steps --warmup --queue-depth \
  --exchange-writes --mtu \
  --iperf-seconds --prefix --build-dir --keep --workload --model --epochs --batch --evals-per-epoch --runs --plot \
  --ops --push-lead --send-order --block --timeline; do
  grep -q -- "$option" "$tmp/help" || fail "--help does not mention $option"
done

step "wrong options are refused with exit 2 and the reason"
refused() { # EXPECTED-TEXT ARGS...
  local expected=$1 rc=0
  shift
  "$cluster" --build-dir "$build" "$@" >"$tmp/out" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || fail "bench/cluster $* exited $rc, expected 2: $(cat "$tmp/out")"
  grep -q -- "$expected" "$tmp/out" || fail "bench/cluster $*: expected '$expected' in: $(cat "$tmp/out")"
}
refused "--placement 'rack': must be dedicated or colocated" --placement rack
refused "--rate '1gbps': must be a whole number with kbit, mbit or gbit" --rate 1gbps
refused "--model-size '768K': must be a non-zero multiple of 2 shards x 256K" --model-size 768K
refused "--workers '0': must be a whole number in 1..64" --workers 0
refused "unknown argument '--fast'" --fast
refused "--workload 'bert': must be pushpull or train" --workload bert
refused "--runs: unknown run 'horovod'" --workload train --runs ddp,horovod
refused "--runs: unknown run 'ddp-powersgd0'" --workload train --runs ddp,ddp-powersgd0
refused "--epochs '0': must be a number > 0" --workload train --epochs 0
refused "--mode 'async,ssp': each mode must be async or sync" --mode async,ssp
refused "--mode 'sync,sync': a mode is named twice" --mode sync,sync
refused "--ops 'push': each op must be step, exchange or host" --ops push
refused "--ranks-per-host '0': must be a whole number in 1..16" --ranks-per-host 0
refused "--workers 64 x --ranks-per-host 4: at most 128 ranks" --workers 64 --ranks-per-host 4
refused "--host-aggregation 'yes': must be on or off" --host-aggregation yes
refused "--push-lead '-1': must be a whole number in 0..1000000" --push-lead -1
refused "--send-order 'fifo': must be ascending, descending or queue" --send-order fifo
refused "--block '24K': must be 16K, 32K, 64K, 128K, 256K or auto" --block 24K
refused "--block auto: only with --workload train" --block auto

[ "$(id -u)" = 0 ] || skip "bench/cluster needs root (network namespaces, tgtd)"
command -v iperf3 >/dev/null || skip "iperf3 is not installed (scripts/setup.sh installs it)"
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || skip "/usr/bin/python3 has no torch (python3-torch)"
command -v tgtd >/dev/null || [ -x /usr/sbin/tgtd ] || skip "tgtd is not installed (tgt)"

step "a DDP hook this torch cannot run: refused before anything starts, in train.py's words"
if /usr/bin/python3 -c 'import sys, torch; sys.exit(torch.version.cuda is not None)'; then
  refused "--runs ddp-bf16: argument --ddp-hook: 'bf16': DDP runs bf16_compress_hook only on a torch with CUDA" \
    --workload train --runs ddp,ddp-bf16
fi

step "a namespace of the prefix already there: refused, and left alone"
ip netns add "$prefix-sw"
refused "network namespaces named $prefix-\* exist already" --prefix "$prefix"
ip netns list | grep -q "^$prefix-sw" || fail "the refusal removed a namespace it did not make"
ip netns del "$prefix-sw"

step "a tiny cluster: 2 workers, 2 shard hosts, 4M model, 100mbit links"
rc=0
"$cluster" --build-dir "$build" --prefix "$prefix" --workers 2 --shards 2 --model-size 4M --rate 100mbit \
  --steps 3 --warmup 1 --iperf-seconds 1 >"$tmp/run" 2>&1 || rc=$?
cat "$tmp/run"
[ "$rc" -eq 0 ] || fail "bench/cluster exited $rc"
if ip netns list | grep -q "^$prefix-"; then fail "namespaces left behind: $(ip netns list | grep "^$prefix-")"; fi
for control in $((BLOCKPS_CONTROL_OFFSET + 900)) $((BLOCKPS_CONTROL_OFFSET + 901)); do
  [ ! -e "/var/run/tgtd/socket.$control" ] || fail "the tgtd of control $control was not stopped by ps-down"
done
work=$(sed -n 's/.*work directory \(\/tmp\/blockps-cluster\.[A-Za-z0-9]*\).*/\1/p' "$tmp/run")
[ -n "$work" ] || fail "the run did not name its work directory"
[ ! -e "$work" ] || fail "the work directory $work was left behind"

grep -Eq "link ceiling .* w0->s0 [0-9.]+ Mbit/s, s0->w0 [0-9.]+ Mbit/s, both at once [0-9.]+ [0-9.]+ Mbit/s" "$tmp/run" ||
  fail "no link ceiling line with both directions and --bidir"
# A row: op, w0, w1, slowest, ideal, fraction of the ideal, gloo/blockps.
for op in step exchange gloo; do
  grep -Eq "^cluster: $op +([0-9.]+|-) +([0-9.]+|-) +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$tmp/run" ||
    fail "no complete '$op' row in the report"
done
# The fraction of the ideal is measured against the nominal rate: above 1.05 the report (or the shaping) is wrong.
awk '/^cluster: (step|exchange|gloo) / { if ($(NF - 1) > 1.05 || $(NF - 1) <= 0) { print "implausible: " $0; bad = 1 } }
     END { exit bad }' "$tmp/run" || fail "a fraction of the ideal above 1.05 or not positive"
for op in step exchange; do
  grep -Eq "^cluster: link use per step, $op .*: w0 +[0-9]+%/ *[0-9]+% w1 +[0-9]+%/ *[0-9]+% s0 " "$tmp/run" ||
    fail "no link use line for '$op'"
done
grep -Eq "^cluster: cpu busy .*: step [0-9]+%, exchange [0-9]+%$" "$tmp/run" || fail "no cpu busy line with both runs"
# CPU per byte of both blockps runs (workers and tgtd), of gloo's ranks and of iperf3, each a positive figure.
grep -E "^cluster: CPU-seconds per GB through a host link" "$tmp/run" |
  grep -Eq "; step: workers [0-9]+\.[0-9]+ \+ shards \(tgtd\) [0-9]+\.[0-9]+; exchange: workers [0-9]+\.[0-9]+ \+ shards \(tgtd\) [0-9]+\.[0-9]+; gloo ranks [0-9]+\.[0-9]+; iperf3 \(sender \+ receiver\) [0-9]+\.[0-9]+$" ||
  fail "no CPU-per-byte line with step, exchange, gloo and iperf3"

step "2 hosts x 2 ranks: every rank a worker (exchange) and the host path (host), bytes per host link"
rc=0
"$cluster" --build-dir "$build" --prefix "$prefix" --workers 2 --ranks-per-host 2 --shards 2 --model-size 4M \
  --rate 100mbit --steps 3 --warmup 1 --iperf-seconds 1 --mode sync >"$tmp/hosts" 2>&1 || rc=$?
cat "$tmp/hosts"
[ "$rc" -eq 0 ] || fail "bench/cluster --ranks-per-host 2 exited $rc"
# A row: op, r0..r3 (the host path: rank 0's figure, the others '-'), slowest, ideal, fraction, gloo/blockps.
for op in exchange host gloo; do
  grep -Eq "^cluster: $op( +([0-9.]+|-)){4} +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$tmp/hosts" ||
    fail "no complete '$op' row in the report"
done
# The host path's ideal is one exchange per host, every rank a worker's is two: the report's ideal column says so.
awk '$2 == "exchange" && NF == 10 { e = $(NF - 2) } $2 == "host" && NF == 10 { h = $(NF - 2) }
     END { exit !(e > 0 && h > 0 && e > 1.9 * h && e < 2.1 * h) }' "$tmp/hosts" ||
  fail "the ideals of exchange and host are not 2:1"
# What each worker host's link carried per timed step of the host path, from its counters: M each way (plus the
# frames' headers, about 4.5% at MTU 1500); every rank a worker: about 2 M (the whole run, logins included).
grep -E "^cluster: bytes per timed step .*, host " "$tmp/hosts" | grep -oE "w[0-9] [0-9.]+/[0-9.]+" |
  awk '{ split($2, v, "/"); n++; if (v[1] < 0.98 || v[1] > 1.10 || v[2] < 0.98 || v[2] > 1.10) bad = 1 }
       END { exit !(n == 2 && !bad) }' || fail "the host path's links did not carry M each way per step"
grep -E "^cluster: bytes per step .*, exchange " "$tmp/hosts" | grep -oE "w[0-9] [0-9.]+/[0-9.]+" |
  awk '{ split($2, v, "/"); n++; if (v[1] < 1.9 || v[2] < 1.9) bad = 1 } END { exit !(n == 2 && !bad) }' ||
  fail "with every rank a worker the links did not carry 2 M each way per step"
if ip netns list | grep -q "^$prefix-"; then fail "namespaces left behind: $(ip netns list | grep "^$prefix-")"; fi

step "async and sync in one run, with the timeline: 2 workers, 2 shard hosts, 4M model, 100mbit links"
rc=0
"$cluster" --build-dir "$build" --prefix "$prefix" --workers 2 --shards 2 --model-size 4M --rate 100mbit \
  --steps 3 --warmup 1 --iperf-seconds 1 --mode async,sync --ops exchange --timeline "$tmp/timeline" >"$tmp/modes" 2>&1 || rc=$?
cat "$tmp/modes"
[ "$rc" -eq 0 ] || fail "bench/cluster --mode async,sync --timeline exited $rc"
for label in exchange-async exchange-sync; do
  grep -Eq "^cluster: $label +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$tmp/modes" ||
    fail "no complete '$label' row in the report"
  # 3 timed steps, or 2 where a shard's stream took the next step's exchange into a batch still running (a sync
  # shard's parked READs): its trace then has one span for both, and the timeline numbers steps by those spans.
  grep -Eq "^cluster: $label \((async|sync), 2 workers, [23] timed steps\):$" "$tmp/modes" ||
    fail "no timeline report of $label"
  # Every worker traced its commands: READs and WRITEs of both shards (lanes 1000 and 1001).
  for w in 0 1; do
    trace=$(find "$tmp/timeline" -name "$label-w$w.*.json" | head -1)
    [ -n "$trace" ] || fail "no trace of worker w$w in $label"
    for lane in 1000 1001; do
      grep -q "\"cat\":\"command\".*\"tid\":$lane" "$trace" || fail "$trace has no command of lane $lane"
    done
  done
  [ -s "$tmp/timeline/$label-links.tsv" ] || fail "no link samples of $label"
done
grep -Eq "^cluster: exchange, sync/async \(slowest\): [0-9]+\.[0-9]{3} \(sync [+-][0-9.]+% on async\)$" "$tmp/modes" ||
  fail "no sync/async line"
grep -Eq "^cluster: +push spread per shard block [0-9.]+ ms" "$tmp/modes" || fail "no push spread in the timeline report"
[ -s "$tmp/timeline/timeline.png" ] || fail "no timeline figure"
[ -s "$tmp/timeline/report.txt" ] || fail "no timeline report file"
if ip netns list | grep -q "^$prefix-"; then fail "namespaces left behind: $(ip netns list | grep "^$prefix-")"; fi

step "a tiny training workload: the MLP, 0.05 epochs, DDP, DDP with the blockps hook and sync shards on 100mbit links"
rc=0
"$cluster" --build-dir "$build" --prefix "$prefix" --workers 2 --shards 2 --rate 100mbit --iperf-seconds 1 \
  --workload train --model mlp --epochs 0.05 --evals-per-epoch 40 --runs ddp,ddp-blockps,ps-sync \
  --timeline "$tmp/train-timeline" >"$tmp/train" 2>&1 || rc=$?
cat "$tmp/train"
[ "$rc" -eq 0 ] || fail "bench/cluster --workload train exited $rc"
if ip netns list | grep -q "^$prefix-"; then fail "namespaces left behind: $(ip netns list | grep "^$prefix-")"; fi
for run in ddp ddp-blockps ps-sync; do
  # The run's evaluations (rank 0's lines), its report row, and its images/s against the link bound.
  grep -Eq "^cluster: +$run epoch +0\.0[0-9] +loss [0-9.]+ +test acc +[0-9.]+%" "$tmp/train" || fail "no evaluation line of $run"
  grep -Eq "^cluster: $run +mlp +2 +0\.0[0-9] +[0-9.]+% " "$tmp/train" || fail "no report row of $run"
  awk -v run="$run" '$2 == run && /of the link bound/ { found = 1; if ($(NF - 4) <= 0 || $(NF - 4) > 1.05) bad = 1 }
       END { exit !found || bad }' "$tmp/train" || fail "no plausible fraction of the link bound for $run"
done
# The training timeline: every run's per-phase table (the four phases' link use), its blockps timing where blockps
# carried the gradients, each rank's loop phases and the figure.
for run in ddp ddp-blockps ps-sync; do
  grep -Eq "^cluster: $run: 2 ranks, [0-9]+ timed steps, a step every [0-9]+ ms" "$tmp/train" || fail "no timeline summary of $run"
  grep -Eq "^timeline: +backward +[0-9]+% +[0-9]+% +[0-9]+% +[0-9]+ ms +[0-9]+ ms$" "$tmp/train-timeline/train-report.txt" ||
    fail "no backward row in the training timeline"
  for g in 0 1; do
    grep -q '"name": "forward"' "$tmp/train-timeline/$run-r$g.loop.json" || fail "no forward span of $run rank $g"
  done
done
[ "$(grep -cE "^cluster: +blockps \(medians over ranks and steps\): first WRITE issued" "$tmp/train")" -eq 2 ] ||
  fail "the training timeline did not time blockps's commands of ddp-blockps and ps-sync (and only those)"
[ "$(grep -cE "^cluster: +blockps streams: per shard and step, [0-9]+ ms from a stream's last WRITE" "$tmp/train")" -eq 2 ] ||
  fail "the training timeline did not measure the streams' tails of ddp-blockps and ps-sync"
[ -s "$tmp/train-timeline/train-timeline.png" ] || fail "no training timeline figure"
