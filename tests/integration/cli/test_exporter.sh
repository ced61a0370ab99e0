#!/usr/bin/env bash
# `blockps exporter` scraped by Debian's real Prometheus server: configs/shard0.conf and shard1.conf through
# scripts/ps-up.sh, the exporter on a free loopback port, Prometheus scraping it every second; through
# Prometheus's HTTP query API: the target is up, both shards are up, blockps_pushes_total grows while a worker
# pushes (`blockps bench --op push`), and a shard killed with -9 shows as blockps_shard_up 0 while the other
# still reports.
#   test_exporter.sh --repo REPO --blockps PATH-TO-blockps
# Exit 0: pass; 77: skipped (not root, tgt missing); anything else: fail. Prometheus missing is a failure in CI
# (CI=true; scripts/setup.sh installs it) and a loud skip elsewhere.
set -euo pipefail

# shellcheck source=tests/integration/shell_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_lib.sh"
blockps=''
args=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --blockps) blockps=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
parse_test_args "${args[@]}"

require_root_and_tgt
if ! command -v prometheus >/dev/null; then
  [ "${CI:-}" != true ] || fail "prometheus is not installed (scripts/setup.sh installs Debian's prometheus)"
  skip "prometheus is not installed (scripts/setup.sh installs Debian's prometheus)"
fi
[ -x "$blockps" ] || fail "--blockps $blockps is not an executable"
py=/usr/bin/python3

tmp=$(mktemp -d "${TMPDIR:-/tmp}/blockps-exporter-XXXXXX")
export BLOCKPS_STATE_DIR=$tmp/run
# Controls 31701-31702, portals 61261-61262, the exporter 61270 and Prometheus 61271: clear of TgtdInstance
# (2000-29999 / 20000-32767), of the other script tests (the demo's portals are 43261-43262), and above Linux's
# ephemeral range (32768-60999): a port there may be taken by another test's outgoing connection between the check
# below and the bind (CI saw the exporter's --listen 127.0.0.1:41270 refused so, 2026-11-29).
export BLOCKPS_CONTROL_OFFSET=31700 BLOCKPS_PORT_OFFSET=58000
exporter_port=61270 prom_port=61271
for port in "$exporter_port" "$prom_port"; do
  if ss -ltn | grep -q ":$port\b"; then fail "port $port is taken (ss -ltn): another program listens there"; fi
done
pids=()
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  "$repo/scripts/ps-down.sh" >/dev/null 2>&1 || true
  if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
    for log in "$tmp"/exporter.log "$tmp"/prometheus.log; do
      [ -f "$log" ] && { echo "---- $log" >&2; tail -n 30 "$log" >&2; }
    done
  fi
  finish_test "$rc" "$tmp"
}
trap cleanup EXIT

# Prometheus's instant query QUERY: the first result's value, or "" when it has none yet.
query() {
  "$py" - "$prom_port" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/api/v1/query?query=" + urllib.parse.quote(sys.argv[2])
try:
    r = json.load(urllib.request.urlopen(url, timeout=5))
except Exception:
    r = {}
res = r.get("data", {}).get("result", [])
print(res[0]["value"][1] if res else "")
PY
}
# Waits (up to SECONDS) until QUERY's value satisfies the python expression TEST on v (a float).
wait_for() { # SECONDS QUERY TEST WHAT
  local deadline=$((SECONDS + $1)) v=''
  while [ "$SECONDS" -lt "$deadline" ]; do
    v=$(query "$2")
    if [ -n "$v" ] && "$py" -c "import sys; v=float(sys.argv[1]); sys.exit(0 if ($3) else 1)" "$v"; then
      echo "$v"
      return 0
    fi
    sleep 0.5
  done
  fail "$4: $2 is '${v}' after $1 s"
}

confs=()
example_confs_into "$tmp" shard0 shard1
step "ps-up configs/shard0.conf configs/shard1.conf"
"$repo/scripts/ps-up.sh" "${confs[@]}" || fail "ps-up could not start the example shards"
cluster=$tmp/cluster.toml
example_cluster_file "$cluster" iqn.2026-11.io.blockps:exporter-test

step "the exporter and Prometheus"
if out=$("$blockps" -c "$cluster" exporter --listen nonsense 2>&1); then fail "--listen nonsense was accepted"; fi
grep -q "must be HOST:PORT" <<<"$out" || fail "--listen nonsense: no clear error: $out"
"$blockps" -c "$cluster" exporter --listen "127.0.0.1:$exporter_port" >"$tmp/exporter.log" 2>&1 &
pids+=($!)
cat >"$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: blockps
    static_configs:
      - targets: ['127.0.0.1:$exporter_port']
YML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$tmp/prometheus.log" 2>&1 &
pids+=($!)
wait_for 60 'up{job="blockps"}' 'v == 1' "Prometheus does not scrape the exporter" >/dev/null
wait_for 30 'min(blockps_shard_up)' 'v == 1' "a shard is not up" >/dev/null
before=$(wait_for 30 'sum(blockps_pushes_total)' 'v >= 0' "no blockps_pushes_total")

step "a worker pushes: blockps_pushes_total grows"
"$blockps" -c "$cluster" bench --op push --iterations 20 --no-progress >"$tmp/bench.out" 2>&1 ||
  fail "blockps bench --op push failed: $(cat "$tmp/bench.out")"
after=$(wait_for 30 'sum(blockps_pushes_total)' "v > $before" "the pushes did not reach Prometheus")
echo "blockps_pushes_total: $before -> $after"
wait_for 30 'sum(blockps_push_bytes_total)' 'v >= 20 * 32 * 1048576' "push bytes" >/dev/null
wait_for 30 'count(blockps_aggregation_seconds_count)' 'v == 2' "aggregation summaries" >/dev/null

step "shard1 killed with -9: blockps_shard_up 0 for it, shard0 still reports"
kill -9 "$(cat "$BLOCKPS_STATE_DIR/shard1/pid")"
wait_for 60 'blockps_shard_up{shard="shard1"}' 'v == 0' "the dead shard is not reported down" >/dev/null
wait_for 30 'blockps_shard_up{shard="shard0"}' 'v == 1' "the live shard stopped reporting" >/dev/null
echo "exporter test passed"
