#!/usr/bin/env bash
# Integration test of fio_jobs/*.fio and scripts/fio-run.sh (the NBD route: qemu-nbd --cache=none over QEMU's
# iscsi driver, fio's nbd engine), against real shards: the example configs configs/shard0.conf and
# configs/shard1.conf (checkpoints moved into a temp dir) plus one opt=sum shard of our own, started with
# scripts/ps-up.sh on private control numbers and ports.
#   test_fio_jobs.sh --repo REPO --lu-io PATH-TO-blockps_lu_io
# Checks: every job file in fio_jobs/ runs briefly through fio-run.sh (exit status 0, fio's JSON shows I/O in
# every job); fio-run.sh's errors (missing job file, bad URL, no tgtd, qemu-nbd refused, unmapped variable);
# faithfulness of the route: a fio write is read back through libiscsi, pushes of +1.0f through fio to an
# opt=sum grad LU give exactly init + N (checked through libiscsi against a float32 reference and through a
# fio pull), and target-side changes made through libiscsi while qemu-nbd runs (a weights write, a push) are
# seen by the next fio read.
# Exit 0: pass; 77: skipped (not root, fio/qemu-nbd/tgt/python3 missing); anything else: fail.
set -euo pipefail

# shellcheck source=tests/integration/shell_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_lib.sh"
parse_test_args "$@"

[ "$(id -u)" = 0 ] || skip "tgtd needs root and this is uid $(id -u)"
export PATH=$PATH:/usr/sbin:/sbin
for tool in tgtd tgtadm tgt-admin fio qemu-nbd; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (apt-get install tgt fio qemu-utils qemu-block-extra)"
done
fio --enghelp=nbd >/dev/null 2>&1 || skip "this fio has no nbd engine"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "/usr/bin/python3 is missing (it reads fio's JSON output)"
[ -d "$repo/fio_jobs" ] || fail "--repo $repo has no fio_jobs/"
[ -x "$lu_io" ] || fail "--lu-io $lu_io is not an executable"
repo=$(cd "$repo" && pwd)
lu_io=$(realpath "$lu_io")
module_dir=${BLOCKPS_BACKING_STORE_DIR:-/usr/lib/tgt/backing-store}
[ -f "$module_dir/bs_blockps.so" ] ||
  fail "$module_dir/bs_blockps.so is missing: build the project (ctest points BLOCKPS_BACKING_STORE_DIR at it)"

up=$repo/scripts/ps-up.sh
down=$repo/scripts/ps-down.sh
run=$repo/scripts/fio-run.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/blockps-fio-jobs-XXXXXX")
export BLOCKPS_STATE_DIR=$tmp/run
# Private ranges: TgtdInstance uses controls 2000..29999 and ports 20000..32767, test_ps_scripts controls
# 30000..31999 and ports 7000+3261..16000+3262, the demo test control 31001.. and port 43261..
export BLOCKPS_CONTROL_OFFSET=31200
export BLOCKPS_PORT_OFFSET=42000
# fio-run.sh keeps its sockets and qemu-nbd logs under TMPDIR: under $tmp, so the test can see leftovers.
mkdir -p "$tmp/fiorun"
# fio writes some files into its current directory (exec_prerun output, verify state): keep them in $tmp.
cd "$tmp"

cleanup() {
  local rc=$?
  cd /
  "$down" >/dev/null 2>&1 || true
  finish_test "$rc" "$tmp"
}
trap cleanup EXIT

# The example configs, with only the checkpoint directory moved into $tmp; and an opt=sum shard.
confs=()
example_confs_into "$tmp" shard0 shard1
sumopts='size=4M;dtype=f32;opt=sum;init=zeros'
cat >"$tmp/fiosum.conf" <<EOF
control-port 3
blockps-portal 127.0.0.1:3263
<target iqn.2026-11.io.blockps:fiosum>
    MaxRecvDataSegmentLength 262144
    MaxXmitDataSegmentLength 262144
    MaxBurstLength 16776192
    FirstBurstLength 16776192
    InitialR2T No
    ImmediateData Yes
    initiator-address ALL
    allow-in-use yes
    blockps-shard $tmp/lib/fiosum/model.ckpt '$sumopts'
</target>
EOF
confs+=("$tmp/fiosum.conf")
p0=$((3261 + BLOCKPS_PORT_OFFSET)) p1=$((3262 + BLOCKPS_PORT_OFFSET)) ps=$((3263 + BLOCKPS_PORT_OFFSET))
u0=iscsi://127.0.0.1:$p0/iqn.2026-11.io.blockps:shard0
u1=iscsi://127.0.0.1:$p1/iqn.2026-11.io.blockps:shard1
us=iscsi://127.0.0.1:$ps/iqn.2026-11.io.blockps:fiosum

step "start 3 shards (ports $p0 $p1 $ps)"
"$up" "${confs[@]}" || fail "ps-up failed"

# fio_run NAME ARGS...: scripts/fio-run.sh ARGS -- JSON output into $tmp/NAME.json; fails on a non-zero exit,
# on a qemu-nbd left running, and when a job of the JSON moved no bytes.
fio_run() {
  local name=$1 rc=0
  shift
  TMPDIR=$tmp/fiorun "$run" "$@" -- --output-format=json --output="$tmp/$name.json" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" -ne 0 ]; then
    cat "$tmp/$name.err" >&2
    cat "$tmp/$name.json" >&2 2>/dev/null || true
    fail "$name: fio-run.sh exited with $rc"
  fi
  [ -z "$(find "$tmp/fiorun" -mindepth 1 2>/dev/null)" ] || fail "$name: fio-run.sh left files in TMPDIR"
  ! pgrep -f "$tmp/fiorun" >/dev/null || fail "$name: a qemu-nbd started by fio-run.sh is still running"
  "$PY" - "$tmp/$name.json" <<'EOF' || fail "$name: fio's JSON output does not show I/O in every job"
import json, sys
doc = json.load(open(sys.argv[1]))
jobs = doc["jobs"]
assert jobs, "no jobs"
bad = False
for j in jobs:
    r, w = j["read"]["io_bytes"], j["write"]["io_bytes"]
    print(f"    {j['jobname']:<16} read {r / 2**20:9.1f} MiB {j['read']['bw_bytes'] / 2**20:8.1f} MiB/s"
          f"   write {w / 2**20:9.1f} MiB {j['write']['bw_bytes'] / 2**20:8.1f} MiB/s   error {j['error']}")
    if r + w == 0 or j["error"] != 0:
        bad = True
sys.exit(1 if bad else 0)
EOF
}

step "fio-run.sh errors"
expect_error() { # PATTERN ARGS...: fio-run.sh fails with exit 2 and a message matching PATTERN
  local pattern=$1 out rc=0
  shift
  out=$(TMPDIR=$tmp/fiorun "$run" "$@" 2>&1) || rc=$?
  [ "$rc" -eq 2 ] || fail "fio-run.sh $* exited with $rc (expected 2): $out"
  grep -q -- "$pattern" <<<"$out" || fail "fio-run.sh $*: message does not say '$pattern': $out"
  echo "    ok: $out" | head -n 1
}
matrix=$repo/fio_jobs/matrix-psync-qd1.fio
expect_error "no such file" "$tmp/missing.fio" "BLOCKPS_GRAD_DEV=$u0/1"
expect_error "not an LU URL" "$matrix" "BLOCKPS_GRAD_DEV=http://127.0.0.1/x/1"
expect_error "no VAR=URL given" "$matrix"
expect_error "no BLOCKPS_WEIGHTS_DEV=URL was given" "$repo/fio_jobs/stress.fio" "BLOCKPS_GRAD_DEV=$u0/1"
expect_error "nothing accepts connections at 127.0.0.1:$((ps + 50))" "$matrix" \
  "BLOCKPS_GRAD_DEV=iscsi://127.0.0.1:$((ps + 50))/iqn.2026-11.io.blockps:shard0/1"
expect_error "Target not found" "$matrix" "BLOCKPS_GRAD_DEV=iscsi://127.0.0.1:$p0/iqn.2026-11.io.blockps:nosuch/1"
expect_error "LOGICAL_UNIT_NOT_SUPPORTED" "$matrix" "BLOCKPS_GRAD_DEV=$u0/9"
printf '[j]\nrw=read\nfilename=/dev/sda\n' >"$tmp/plain.fio"
expect_error "exactly one device" "$tmp/plain.fio" "BLOCKPS_GRAD_DEV=$u0/1"
! pgrep -f "$tmp/fiorun" >/dev/null || fail "a qemu-nbd of a failed run is still running"

step "every job file in fio_jobs/, briefly"
short=(--set runtime=1 --set ramp_time=0)
ran=0
for job in "$repo"/fio_jobs/*.fio; do
  name=$(basename "$job" .fio)
  echo "  $name"
  # As users run it on /dev devices (its own engines): fio must accept every option, and direct=1.
  BLOCKPS_GRAD_DEV=/dev/null BLOCKPS_GRAD_DEV0=/dev/null BLOCKPS_GRAD_DEV1=/dev/null BLOCKPS_WEIGHTS_DEV=/dev/null \
    BLOCKPS_STATUS_DEV=/dev/null fio --parse-only "$job" >"$tmp/parse.out" 2>&1 ||
    fail "fio --parse-only rejects fio_jobs/$name.fio: $(cat "$tmp/parse.out")"
  grep -qx 'direct=1' "$job" || fail "fio_jobs/$name.fio does not set direct=1"
  case "$name" in
    matrix-*) fio_run "$name" "${short[@]}" "$job" "BLOCKPS_GRAD_DEV=$u0/1" ;;
    all-shards) fio_run "$name" "${short[@]}" "$job" "BLOCKPS_GRAD_DEV0=$u0/1" "BLOCKPS_GRAD_DEV1=$u1/1" ;;
    exchange) fio_run "$name" "${short[@]}" "$job" "BLOCKPS_GRAD_DEV=$u0/1" ;;
    verify-weights) fio_run "$name" --set size=2M "$job" "BLOCKPS_WEIGHTS_DEV=$u1/2" ;;
    stress) fio_run "$name" --set runtime=3 "$job" "BLOCKPS_GRAD_DEV=$u0/1" "BLOCKPS_WEIGHTS_DEV=$u0/2" \
      "BLOCKPS_STATUS_DEV=$u0/3" ;;
    *) fail "fio_jobs/$name.fio is not known to this test: add a case for it" ;;
  esac
  ran=$((ran + 1))
done
[ "$ran" -ge 6 ] || fail "only $ran job files in fio_jobs/"
"$PY" - "$tmp/matrix-libaio-qd16.json" "$tmp/matrix-psync-qd1.json" <<'EOF' || fail "the matrix jobs are incomplete"
import json, sys
for path in sys.argv[1:]:
    names = {j["jobname"] for j in json.load(open(path))["jobs"]}
    want = {f"{rw}-{bs}" for rw in ("read", "write") for bs in ("64k", "256k", "1m", "4m")}
    assert names == want, (path, sorted(names))
EOF
grep -q '"verify_pattern\|verify' "$repo/fio_jobs/verify-weights.fio" || fail "verify-weights.fio does not verify"

step "faithful NBD route: pushes through fio to an opt=sum grad LU give exactly init + N"
# Known weights in the first MiB (libiscsi), zeros elsewhere (init=zeros).
"$lu_io" "$us/2" write 0 1M 5 || fail "writing the initial weights"
"$lu_io" "$us/2" read 0 1M >"$tmp/init.bin" || fail "reading the initial weights"
cat >"$tmp/faithful.fio" <<EOF
[global]
filename=\${SUM_GRAD}
verify_state_save=0
ioengine=libaio
iodepth=4
direct=1
bs=256k
rw=write
scramble_buffers=0
; 1.0f (bytes 00 00 80 3f) in every element of every push
buffer_pattern=0x0000803f

; 3 pushes of +1.0 to every element of [0, 1M)
[push3]
offset=0
size=1M
loops=3

; 2 pushes of +1.0 to every element of [1M, 2M)
[push2]
offset=1M
size=1M
loops=2

; a pull through the same qemu-nbd: 2.0f (00 00 00 40) everywhere in [1M, 2M)
[pull2]
stonewall
rw=read
offset=1M
size=1M
do_verify=1
verify=pattern
verify_pattern=0x00000040
verify_fatal=1

; a target-side change through libiscsi (zeros into the weights of [1M, 2M)) while qemu-nbd runs: the next
; pull must see it (a cache in the path would answer 2.0)
[pull-after-libiscsi]
stonewall
exec_prerun=$lu_io $us/2 write 1M 1M 0
rw=read
offset=1M
size=1M
do_verify=1
verify=pattern
verify_pattern=0x00000000
verify_fatal=1

; a write of 1.0f into the WEIGHTS of [2M, 3M), read back through libiscsi below
[weights-fill]
stonewall
filename=\${SUM_WEIGHTS}
offset=2M
size=1M
EOF
fio_run faithful "$tmp/faithful.fio" "SUM_GRAD=$us/1" "SUM_WEIGHTS=$us/2"
"$PY" - "$tmp/faithful.json" <<'EOF' || fail "the pushes did not move exactly the bytes asked for"
import json, sys
jobs = {j["jobname"]: j for j in json.load(open(sys.argv[1]))["jobs"]}
assert jobs["push3"]["write"]["io_bytes"] == 3 << 20, jobs["push3"]["write"]["io_bytes"]
assert jobs["push2"]["write"]["io_bytes"] == 2 << 20, jobs["push2"]["write"]["io_bytes"]
EOF
"$lu_io" "$us/2" read 0 1M >"$tmp/after3.bin" || fail "reading the weights after the pushes"
"$PY" - "$tmp/init.bin" "$tmp/after3.bin" <<'EOF' || fail "weights after 3 pushes of +1.0 are not init + 3 (float32, one push at a time)"
import array, sys
w = array.array("f"); w.frombytes(open(sys.argv[1], "rb").read())
got = array.array("f"); got.frombytes(open(sys.argv[2], "rb").read())
for _ in range(3):
    w = array.array("f", (x + 1.0 for x in w))  # each push rounds to float32, as the shard does
bad = [i for i in range(len(w)) if w[i] != got[i]]
if bad:
    i = bad[0]
    print(f"{len(bad)} of {len(w)} elements differ; element {i}: expected {w[i]!r}, got {got[i]!r}")
    sys.exit(1)
print(f"    {len(w)} elements = init + 3.0 exactly")
EOF
"$lu_io" "$us/2" verify 1M 1M 0 || fail "[1M, 2M) does not hold the zeros written through libiscsi"
printf '\000\000\200\077%.0s' $(seq 262144) >"$tmp/ones.bin"
"$lu_io" "$us/2" read 2M 1M | cmp -s - "$tmp/ones.bin" || fail "libiscsi does not read back the 1.0f that fio wrote through qemu-nbd"
"$lu_io" "$us/2" verify 3M 1M 0 || fail "[3M, 4M) changed although nothing was written there"

step "faithful NBD route: a push through libiscsi while qemu-nbd runs is seen by the next fio read"
# [3M, 4M) holds zeros. A first fio pull finds zeros; then a libiscsi push of the float pattern 7 (opt=sum:
# the weights become the pattern) and a second pull through the same qemu-nbd that expects zeros must FAIL
# verification (a cache would still answer zeros).
cat >"$tmp/pushseen.fio" <<EOF
[global]
filename=\${SUM_GRAD}
verify_state_save=0
ioengine=libaio
iodepth=4
direct=1
bs=256k
rw=read
offset=3M
size=1M
do_verify=1
verify=pattern
verify_pattern=0x00000000
verify_fatal=1

[zeros-before]

[zeros-after-push]
stonewall
exec_prerun=$lu_io $us/1 write 3M 1M 7
EOF
rc=0
TMPDIR=$tmp/fiorun "$run" "$tmp/pushseen.fio" "SUM_GRAD=$us/1" -- --output-format=json \
  --output="$tmp/pushseen.json" 2>"$tmp/pushseen.err" || rc=$?
[ "$rc" -ne 0 ] || fail "fio read zeros after a push through libiscsi: the NBD route answered from a cache"
! pgrep -f "$tmp/fiorun" >/dev/null || fail "a qemu-nbd started by fio-run.sh is still running"
"$PY" - "$tmp/pushseen.json" <<'EOF' || { cat "$tmp/pushseen.err" >&2; fail "unexpected fio result (see above)"; }
import json, sys
jobs = {j["jobname"]: j for j in json.load(open(sys.argv[1]))["jobs"]}
assert jobs["zeros-before"]["error"] == 0 and jobs["zeros-before"]["read"]["io_bytes"] == 1 << 20, jobs["zeros-before"]
assert jobs["zeros-after-push"]["error"] != 0, "the second pull did not fail verification"
print("    first pull: zeros; pull after the libiscsi push: verification failed, as it must")
EOF
grep -q "verify" "$tmp/pushseen.err" || fail "fio failed, but not on verification: $(cat "$tmp/pushseen.err")"
"$lu_io" "$us/2" verify 3M 1M 7 || fail "the weights of [3M, 4M) are not the pattern pushed through libiscsi"

step "stop the shards"
"$down" || fail "ps-down failed"
echo "PASS"
