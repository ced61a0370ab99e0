#!/usr/bin/env bash
# Test of scripts/attach.sh without a kernel initiator: its --dry-run (the iscsiadm/udevadm/partx commands it
# would run for --transport iser and tcp, and the cluster file it would write from --status-json pages), its
# --logout commands, and its argument errors. The real logins run in the VM (tests/vm/run.sh).
#   test_attach.sh --repo REPO
# Exit 0: pass; 77: skipped (/usr/bin/python3 missing: it checks the TOML with tomllib); else: fail.
set -euo pipefail

# shellcheck source=tests/integration/shell_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_lib.sh"
parse_test_args "$@"
[ -x "$repo/scripts/attach.sh" ] || fail "--repo $repo has no executable scripts/attach.sh"
PY=/usr/bin/python3
if [ ! -x "$PY" ] || ! "$PY" -c 'import tomllib' 2>/dev/null; then
  echo "TEST SKIPPED: /usr/bin/python3 with tomllib (3.11) is needed to check the TOML"
  exit 77
fi
attach=$repo/scripts/attach.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/blockps-attach-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset BLOCKPS_PORT_OFFSET

# Status pages as the module writes them (pretty-printed, NUL-padded), and one compact with decoys.
status_page() { # SIZE DTYPE BLOCK
  printf '{\n  "blockps": {\n    "status_format": 1\n  },\n  "counters": {\n    "pulls": 1,\n    "size": 999\n  },\n'
  printf '  "shard": {\n    "block": %s,\n    "blocks": 64,\n    "dtype": "%s",\n    "elements": 4194304,\n' "$3" "$2"
  printf '    "options": "size=16M;dtype=f32;block=256K",\n    "size": %s\n  }\n}\n' "$1"
  head -c 3000 /dev/zero
}
status_page 16777216 f32 262144 >"$tmp/s0.json"
printf '{"size":1,"shard":{"dtype":"f32","size":16777216,"nested":{"size":5,"block":7},"block":262144},"block":3}' >"$tmp/s1.json"
status_page 8388608 bf16 262144 >"$tmp/bf16.json"
status_page 16777216 f32 131072 >"$tmp/b128.json"
printf '{"blockps": {"status_format": 1}}' >"$tmp/noshard.json"

expect_error() { # PATTERN ARGS...
  local pattern=$1 out rc=0
  shift
  out=$("$attach" "$@" 2>&1) || rc=$?
  [ "$rc" -eq 2 ] || fail "attach.sh $* exited with $rc (expected 2): $out"
  grep -q -- "$pattern" <<<"$out" || fail "attach.sh $*: message does not say '$pattern': $out"
  echo "    ok: $(head -n 1 <<<"$out")"
}
c0=$repo/configs/shard0.conf c1=$repo/configs/shard1.conf
# configs/shard0.conf with the shard as three <backing-store> blocks instead of its blockps-shard line.
explicit0=$repo/tests/integration/configs/shard0-backing-stores.conf
S=(--status-json "$tmp/s0.json" --status-json "$tmp/s1.json")

step "argument errors"
expect_error "no shards given" --out "$tmp/c.toml" --dry-run
expect_error "--out CLUSTER.toml is required" --conf "$c0" --dry-run --status-json "$tmp/s0.json"
expect_error "must be iser or tcp" --transport rdma --conf "$c0"
expect_error "needs a value" --conf
expect_error "expected HOST:PORT" --portal 127.0.0.1 --out "$tmp/c.toml"
expect_error "give it after the --portal" --target iqn.2026-11.io.blockps:shard0 --portal 127.0.0.1:3261
expect_error "not an iSCSI name" --portal 127.0.0.1:3261 --target shard0
expect_error "needs the IQN of shard 1" --dry-run --portal 127.0.0.1:3261 --out "$tmp/c.toml" --status-json "$tmp/s0.json"
expect_error "give --status-json FILE per shard" --dry-run --conf "$c0" --out "$tmp/c.toml"
expect_error "give one per shard" --dry-run --conf "$c0" --conf "$c1" --out "$tmp/c.toml" --status-json "$tmp/s0.json"
expect_error "no such file" --conf "$tmp/missing.conf" --out "$tmp/c.toml"
expect_error "no such file" --conf "$c0" --status-json "$tmp/missing.json"
expect_error "unknown argument" --conf "$c0" --colour red
expect_error "given twice" --dry-run --conf "$c0" --conf "$c0" --out "$tmp/c.toml" "${S[@]}"
expect_error "drop --out" --logout --conf "$c0" --out "$tmp/c.toml"
expect_error "no shard.size, shard.dtype and shard.block" --dry-run --conf "$c0" --out "$tmp/c.toml" \
  --status-json "$tmp/noshard.json"
expect_error "disagree on dtype: shard0 has f32, shard1 has bf16" --dry-run --conf "$c0" --conf "$c1" \
  --out "$tmp/c.toml" --status-json "$tmp/s0.json" --status-json "$tmp/bf16.json"
expect_error "disagree on block: shard0 has 262144, shard1 has 131072" --dry-run --conf "$c0" --conf "$c1" \
  --out "$tmp/c.toml" --status-json "$tmp/s0.json" --status-json "$tmp/b128.json"
grep -v '^blockps-portal' "$c0" >"$tmp/noportal.conf"
expect_error "needs exactly one blockps-portal" --conf "$tmp/noportal.conf" --out "$tmp/c.toml"
sed 's/role=status/role=weights/' "$explicit0" >"$tmp/nostatus.conf"
expect_error "role=status" --conf "$tmp/nostatus.conf" --out "$tmp/c.toml"
sed 's#blockps-shard /[^ ]*#blockps-shard#' "$c0" >"$tmp/nopath.conf"
expect_error "^attach: ERROR: --conf $tmp/nopath.conf:$(grep -n '^ *blockps-shard' "$c0" | cut -d: -f1): blockps-shard: the checkpoint path is missing" \
  --conf "$tmp/nopath.conf" --out "$tmp/c.toml"
if [ "$(id -u)" != 0 ]; then
  expect_error "run as root" --conf "$c0" --out "$tmp/c.toml"
fi
[ ! -e "$tmp/c.toml" ] || fail "a failed run wrote the cluster file"

step "iser: the commands and the cluster file (--conf, 2 shards: the IQN-iser targets ps-up.sh adds)"
out=$("$attach" --transport iser --conf "$c0" --conf "$c1" --out "$tmp/c.toml" --dry-run "${S[@]}") ||
  fail "dry run failed: $out"
while IFS= read -r l; do echo "    $l"; done <<<"$out"
[ ! -e "$tmp/c.toml" ] || fail "--dry-run wrote $tmp/c.toml"
want_cmds=(
  "+ mkdir -p /run/lock/iscsi"
  "+ iscsiadm -m discovery -t st -p 127.0.0.1:3261 -I iser -o new"
  "+ iscsiadm -m node -T iqn.2026-11.io.blockps:shard0-iser -p 127.0.0.1:3261 -I iser --login"
  "+ iscsiadm -m discovery -t st -p 127.0.0.1:3262 -I iser -o new"
  "+ iscsiadm -m node -T iqn.2026-11.io.blockps:shard1-iser -p 127.0.0.1:3262 -I iser --login"
  "+ udevadm settle -t 30"
)
for c in "${want_cmds[@]}"; do grep -qxF "$c" <<<"$out" || fail "missing command: $c"; done
for s in "3261 shard0" "3262 shard1"; do
  read -r port name <<<"$s"
  for lun in 1 2 3; do
    grep -qxF "+ partx -d /dev/disk/by-path/ip-127.0.0.1:$port-iscsi-iqn.2026-11.io.blockps:$name-iser-lun-$lun" <<<"$out" ||
      fail "no partx -d for $name LUN $lun"
  done
done
# Order: every discovery before any login (an iSER discovery next to a live session can fail); all logins
# before udevadm settle.
awk '/discovery/ { d++; if (l) bad = 1 } /--login/ { if (d != 2) bad = 1; l++ } /udevadm settle/ { if (l != 2) bad = 1 }
  END { exit bad }' <<<"$out" || fail "commands out of order (want both discoveries, then both logins)"
sed -n '/^# would write /,$p' <<<"$out" | sed 1d >"$tmp/iser.toml"
"$PY" - "$tmp/iser.toml" <<'EOF' || fail "the cluster file is not what the shards need"
import sys, tomllib
doc = tomllib.load(open(sys.argv[1], "rb"))
assert doc["model"] == {"size": "32M", "dtype": "f32", "block": "256K"}, doc["model"]
assert doc["layout"] == {"kind": "stripe"}, doc["layout"]
p = "/dev/disk/by-path/ip-127.0.0.1:{}-iscsi-iqn.2026-11.io.blockps:{}-iser-lun-{}"
want = [{"name": n, "grad": p.format(port, n, 1), "weights": p.format(port, n, 2), "status": p.format(port, n, 3)}
        for n, port in (("shard0", 3261), ("shard1", 3262))]
assert doc["shard"] == want, doc["shard"]
assert set(doc) == {"model", "layout", "shard"}, set(doc)
print("    TOML ok")
EOF

step "the shard as <backing-store> blocks: the same commands and cluster file as its blockps-shard line"
cp "$explicit0" "$tmp/shard0.conf"
want=$("$attach" --transport iser --conf "$c0" --out "$tmp/c.toml" --dry-run --status-json "$tmp/s0.json") ||
  fail "dry run failed: $want"
out=$("$attach" --transport iser --conf "$tmp/shard0.conf" --out "$tmp/c.toml" --dry-run --status-json "$tmp/s0.json") ||
  fail "dry run of the explicit spelling failed: $out"
# Less the header's time of writing, which may differ by a second between the two runs.
want=$(grep -v '# Written by scripts/attach.sh' <<<"$want")
out=$(grep -v '# Written by scripts/attach.sh' <<<"$out")
[ "$out" = "$want" ] || fail "the spellings differ: $(diff <(echo "$want") <(echo "$out"))"

step "tcp: the default iface, --portal/--target, BLOCKPS_PORT_OFFSET applies to --conf only"
out=$(BLOCKPS_PORT_OFFSET=100 "$attach" --conf "$c0" --portal 10.0.0.2:3262 --target iqn.2026-11.io.blockps:other \
  --out "$tmp/c.toml" --dry-run --status-json "$tmp/s0.json" --status-json "$tmp/s1.json") || fail "dry run failed: $out"
grep -qxF "+ iscsiadm -m discovery -t st -p 127.0.0.1:3361 -I default -o new" <<<"$out" || fail "tcp discovery: $out"
grep -qxF "+ iscsiadm -m node -T iqn.2026-11.io.blockps:shard0 -p 127.0.0.1:3361 -I default --login" <<<"$out" ||
  fail "tcp login: $out"
grep -qxF "+ iscsiadm -m node -T iqn.2026-11.io.blockps:other -p 10.0.0.2:3262 -I default --login" <<<"$out" ||
  fail "tcp login of --portal: $out"
! grep -q -- "-I iser" <<<"$out" || fail "tcp run uses the iser iface"
sed -n '/^# would write /,$p' <<<"$out" | sed 1d >"$tmp/tcp.toml"
"$PY" - "$tmp/tcp.toml" <<'EOF' || fail "the tcp cluster file is wrong"
import sys, tomllib
doc = tomllib.load(open(sys.argv[1], "rb"))
assert doc["model"] == {"size": "32M", "dtype": "f32", "block": "256K"}, doc["model"]
s = doc["shard"]
assert [x["name"] for x in s] == ["shard0", "other"], s
assert s[0]["grad"] == "/dev/disk/by-path/ip-127.0.0.1:3361-iscsi-iqn.2026-11.io.blockps:shard0-lun-1", s[0]
assert s[1]["status"] == "/dev/disk/by-path/ip-10.0.0.2:3262-iscsi-iqn.2026-11.io.blockps:other-lun-3", s[1]
print("    TOML ok")
EOF

step "model size: the sum of the shards' sizes (uneven sizes, bf16)"
status_page 8388608 bf16 262144 >"$tmp/bf16b.json"
status_page 12582912 bf16 262144 >"$tmp/bf16c.json"
out=$("$attach" --conf "$c0" --conf "$c1" --out "$tmp/c.toml" --dry-run --status-json "$tmp/bf16.json" \
  --status-json "$tmp/bf16c.json") || fail "dry run failed: $out"
grep -qx 'size = "20M"' <<<"$out" || fail "8M + 12M is not 20M: $out"
grep -qx 'dtype = "bf16"' <<<"$out" || fail "dtype bf16 not taken: $out"

step "--logout"
out=$("$attach" --transport iser --conf "$c0" --conf "$c1" --logout --dry-run) || fail "logout dry run failed: $out"
grep -qxF "+ iscsiadm -m node -T iqn.2026-11.io.blockps:shard0-iser -p 127.0.0.1:3261 -I iser --logout" <<<"$out" ||
  fail "no logout of shard0: $out"
grep -qxF "+ iscsiadm -m node -T iqn.2026-11.io.blockps:shard1-iser -p 127.0.0.1:3262 -I iser --logout" <<<"$out" ||
  fail "no logout of shard1: $out"
grep -qxF "+ iscsiadm -m node -T iqn.2026-11.io.blockps:shard1-iser -p 127.0.0.1:3262 -I iser -o delete" <<<"$out" ||
  fail "no node record deletion of shard1: $out"
! grep -q -- "--login\|would write" <<<"$out" || fail "logout logs in or writes a file: $out"

# The retry of a failed discovery cannot be provoked with the real iscsiadm (the iSER race it covers is rare;
# the VM runs the real one). Here a stand-in iscsiadm first in PATH fails discoveries as told and logs every
# call; a stand-in iscsid keeps the real daemon from starting. Nothing reaches a login.
if [ "$(id -u)" = 0 ]; then
  step "a failed discovery is tried again, 3 times at most, before any login"
  mkdir -p "$tmp/fakebin"
  cat >"$tmp/fakebin/iscsiadm" <<'FAKE'
#!/usr/bin/env bash
echo "$*" >>"$FAKE_LOG"
case "$*" in
  *"-m discovery"*)
    n=$(grep -c -- "-m discovery" "$FAKE_LOG")
    if [ "$n" -le "$FAKE_FAILS" ]; then echo "iscsiadm: iSCSI PDU timed out (stand-in)" >&2; exit 4; fi
    echo "127.0.0.1:3261,1 iqn.2026-11.io.blockps:not-the-shard" ;;
esac
exit 0
FAKE
  printf '#!/bin/sh
exit 0
' >"$tmp/fakebin/iscsid"
  chmod +x "$tmp/fakebin/iscsiadm" "$tmp/fakebin/iscsid"
  attempt_discovery() { # FAILS -> output of attach.sh (which must fail: the stand-in never lists the shard)
    : >"$tmp/fake.log"
    local out rc=0
    out=$(PATH="$tmp/fakebin:$PATH" FAKE_LOG="$tmp/fake.log" FAKE_FAILS=$1 \
      "$attach" --transport iser --conf "$c0" --out "$tmp/c.toml" 2>&1) || rc=$?
    [ "$rc" -eq 2 ] || fail "attach.sh with $1 failing discoveries exited $rc (expected 2): $out"
    ! grep -q -- "--login" "$tmp/fake.log" || fail "attach.sh logged in although discovery failed: $(cat "$tmp/fake.log")"
    printf '%s' "$out"
  }
  out=$(attempt_discovery 2)
  [ "$(grep -c -- "-m discovery" "$tmp/fake.log")" = 3 ] || fail "2 failures then a listing: want 3 discoveries: $(cat "$tmp/fake.log")"
  [ "$(grep -c "trying again" <<<"$out")" = 2 ] || fail "each failed try should say so: $out"
  grep -q "does not list iqn.2026-11.io.blockps:shard0-iser" <<<"$out" || fail "the third try's listing was not used: $out"
  out=$(attempt_discovery 5)
  [ "$(grep -c -- "-m discovery" "$tmp/fake.log")" = 3 ] || fail "want exactly 3 tries: $(cat "$tmp/fake.log")"
  grep -q "discovery at 127.0.0.1:3261 over iser failed 3 times; the last said: iscsiadm: iSCSI PDU timed out" <<<"$out" ||
    fail "the final error does not name the portal, the transport and the last message: $out"
  echo "    ok: $(tail -n 1 <<<"$out")"
  [ ! -e "$tmp/c.toml" ] || fail "a failed attach wrote the cluster file"
else
  echo "--- SKIPPED (not root): the discovery retry (attach.sh runs only as root)"
fi
echo "PASS"
