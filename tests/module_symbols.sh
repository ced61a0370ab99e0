#!/usr/bin/env bash
# The module must load into the installed tgtd: every symbol it needs from outside (tgt's, libc's) must be one
# that tgtd or the libraries tgtd loads define, and it must export register_bs_module (docs/ARCHITECTURE.md,
# "Facts about tgt").
set -euo pipefail
module=$1
tgtd=${TGTD:-/usr/sbin/tgtd}
[ -x "$tgtd" ] || { echo "SKIP: $tgtd not installed"; exit 77; }
nm -D --defined-only "$module" | awk '{print $3}' | grep -qx register_bs_module ||
  { echo "FAIL: $module does not export register_bs_module"; exit 1; }
provided=$(mktemp)
trap 'rm -f "$provided"' EXIT
{
  nm -D --defined-only "$tgtd"
  # tgtd's libraries and the dynamic loader (which defines __tls_get_addr).
  for lib in $(ldd "$tgtd" | awk '/=>/ {print $3} /ld-linux/ && !/=>/ {print $1}'); do nm -D --defined-only "$lib"; done
  # libstdc++ is linked statically into the module; glibc symbols come through tgtd's libc/libm/libpthread.
  for lib in $(ldd "$module" | awk '/=>/ {print $3}'); do nm -D --defined-only "$lib"; done
} | awk '{print $3}' | sed 's/@.*//' | sort -u >"$provided"
# Weak references (w) may stay unresolved by design (transactional-memory and profiling hooks).
missing=$(nm -D --undefined-only "$module" | awk '$1 == "U" {print $2}' | sed 's/@.*//' | sort -u | comm -23 - "$provided")
if [ -n "$missing" ]; then
  echo "FAIL: $module needs symbols that neither tgtd nor its libraries define:"; echo "$missing"; exit 1
fi
echo "ok: all $(nm -D --undefined-only "$module" | wc -l) undefined symbols of $module are provided by $tgtd or its libraries"
