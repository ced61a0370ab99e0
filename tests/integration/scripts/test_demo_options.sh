#!/usr/bin/env bash
# The main job's wrong options are refused before any set-up, build or shard, with exit 2 and the reason:
# scripts/demo.sh's options, and those of the training script it runs (client/examples/train.py), including a
# multi-worker launch that names neither --ps nor --ddp (its ranks would train apart).
#   test_demo_options.sh --repo REPO
set -euo pipefail

# shellcheck source=tests/integration/shell_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_lib.sh"
parse_test_args "$@"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/blockps-demo-options-XXXXXX")
trap 'finish_test $? "$tmp"' EXIT

# refused EXIT-STATUS EXPECTED-TEXT COMMAND...: COMMAND exits EXIT-STATUS and says EXPECTED-TEXT.
refused() {
  local want=$1 expected=$2 rc=0
  shift 2
  "$@" >"$tmp/out" 2>&1 || rc=$?
  [ "$rc" -eq "$want" ] || fail "$* exited $rc, expected $want: $(cat "$tmp/out")"
  grep -qF -- "$expected" "$tmp/out" || fail "$*: expected '$expected' in: $(cat "$tmp/out")"
}

step "scripts/demo.sh refuses wrong options before it sets anything up"
demo=$repo/scripts/demo.sh
refused 2 "demo: --model 'vgg' must be mlp or resnet18" bash "$demo" --model vgg
refused 2 "demo: --epochs '0' must be a number > 0" bash "$demo" --epochs 0
refused 2 "demo: --epochs 'x' must be a number > 0" bash "$demo" --epochs x
refused 2 "demo: --batch '0' must be a whole number >= 1" bash "$demo" --batch 0
refused 2 "demo: --evals-per-epoch '-1' must be a whole number >= 1" bash "$demo" --evals-per-epoch -1
refused 2 "demo: accuracy '1.5' must be a fraction in [0, 1]" bash "$demo" --target-accuracy 1.5
refused 2 "demo: --runs: unknown run 'horovod'" bash "$demo" --runs local,horovod
refused 2 "demo: --out needs a value" bash "$demo" --out
refused 2 "demo: unknown argument '--fast'" bash "$demo" --fast

step "tests/soak/run.sh refuses wrong options before it makes anything"
soak=$repo/tests/soak/run.sh
refused 2 "soak: ERROR: --minutes '0': must be a whole number in 1..1440" bash "$soak" --minutes 0
refused 2 "soak: ERROR: --fault-every '5': must be a whole number in 10..3600" bash "$soak" --fault-every 5
refused 2 "soak: ERROR: --rate '100mb': must be a whole number with kbit, mbit or gbit" bash "$soak" --rate 100mb
refused 2 "soak: ERROR: --min-accuracy '85': must be a fraction in [0, 1]" bash "$soak" --min-accuracy 85
refused 2 "soak: ERROR: --faults: unknown kind 'disk-full'" bash "$soak" --faults shard-kill,disk-full
refused 2 "soak: ERROR: --faults 'link-down,link-down': a kind is named twice" bash "$soak" --faults link-down,link-down
refused 2 "soak: ERROR: unknown argument '--hours'" bash "$soak" --hours 1

py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then skip "$py has no torch (python3-torch): train.py not checked"; fi
step "train.py refuses wrong options and a launch that would train apart"
train=$repo/client/examples/train.py
refused 2 "--epochs 0.0: must be > 0" "$py" "$train" --epochs 0
refused 2 "--batch, --evals-per-epoch and --threads must be >= 1" "$py" "$train" --batch 0
refused 2 "argument --model: invalid choice: 'vgg'" "$py" "$train" --model vgg
refused 2 "argument --ddp: not allowed with argument --ps" "$py" "$train" --ps c.toml --ddp
refused 2 "--early-forward is DistributedOptimizer's: it needs --ps CLUSTER" "$py" "$train" --ddp --early-forward
refused 1 "train.py rank 0: --timeline /nonexistent/t: cannot write /nonexistent/t.loop.json: No such file or directory" \
  "$py" "$train" --timeline /nonexistent/t --epochs 0.01
refused 1 "train.py: WORLD_SIZE=2 without --ps, --ddp or --ddp-blockps: the workers would train apart" \
  env RANK=0 WORLD_SIZE=2 "$py" "$train" --epochs 0.01
echo garbage >"$tmp/not-a-point"
refused 1 "train.py rank 0: --resume $tmp/not-a-point: cannot read it" "$py" "$train" --resume "$tmp/not-a-point" --epochs 0.01

step "train.py --stop-file ends the run at an evaluation, --resume goes on from it, --timeline expands {rank}, {restart} and {pid}"
# 469 steps per epoch at batch 128: an evaluation every 11 steps with 40 per epoch.
touch "$tmp/stop"
"$py" "$train" --epochs 0.1 --evals-per-epoch 40 --stop-file "$tmp/stop" --resume "$tmp/point" --out "$tmp/first.json" \
  --timeline "$tmp/t-{rank}.{restart}.{pid}" >"$tmp/out" 2>&1 || fail "the stopped run failed: $(cat "$tmp/out")"
"$py" -c 'import json, sys; r = json.load(open(sys.argv[1]))["records"]; sys.exit(0 if [x["step"] for x in r] == [11] else 1)' \
  "$tmp/first.json" || fail "--stop-file: the run did not end at its first evaluation (step 11): $(cat "$tmp/first.json")"
first_life=$(ls "$tmp"/t-0.0.*.loop.json 2>/dev/null)
[[ $first_life =~ /t-0\.0\.[0-9]+\.loop\.json$ ]] || fail "--timeline $tmp/t-{rank}.{restart}.{pid} did not write $tmp/t-0.0.PID.loop.json (found: $first_life)"
rm "$tmp/stop"
TORCHELASTIC_RESTART_COUNT=1 "$py" "$train" --epochs 0.05 --evals-per-epoch 40 --stop-file "$tmp/stop" --resume "$tmp/point" \
  --out "$tmp/second.json" --timeline "$tmp/t-{rank}.{restart}.{pid}" >"$tmp/out" 2>&1 || fail "the resumed run failed: $(cat "$tmp/out")"
grep -qF "resumed at step 11 ($tmp/point)" "$tmp/out" || fail "--resume: no 'resumed at step 11' in: $(cat "$tmp/out")"
"$py" -c 'import json, sys; r = json.load(open(sys.argv[1]))["records"]; sys.exit(0 if [x["step"] for x in r] == [11, 22, 23] else 1)' \
  "$tmp/second.json" || fail "--resume: the resumed run's records are not steps 11, 22, 23: $(cat "$tmp/second.json")"
second_life=$(ls "$tmp"/t-0.1.*.loop.json)
[ "$(grep -c '"name": "step"' "$second_life")" = 12 ] || fail "--resume: the resumed run did not take steps 12..23 alone: $(cat "$second_life")"
echo "demo options test passed"
