# shellcheck shell=bash
# What main.sh and the hooks share inside the VM: step messages and outcomes, and reading the cluster files that
# scripts/attach.sh writes.
say() { echo "=== [$(cut -d' ' -f1 /proc/uptime)s] $*"; }
skip() {
  echo "SKIPPED: $*"
  exit 77
}
die() {
  echo "FAIL: $*"
  exit 1
}
# toml_get FILE SHARD_INDEX KEY: a value of the [[shard]] list of a cluster file written by attach.sh
toml_get() {
  awk -v want="$2" -v key="$3" '/^\[\[shard\]\]/ { i++ } i == want + 1 && $1 == key { gsub(/"/, "", $3); print $3 }' "$1"
}
dev_of() { readlink -f "$(toml_get "$1" "$2" "$3")"; } # the /dev/sdX behind a by-path name
