#!/bin/bash
# tests/vm hook: compressed blocks (issue 50) through the kernel initiator's /dev/sdX, with plain O_DIRECT pwrite and
# pread: an averaging shard with compress=sign1 after one warm-up round (configs/vm-compressed0.conf), attached over
# iSER; devcheck.py compressed pushes the warm-up round as f32 and reads its average, then finds a full-precision push
# of a compressed round refused, pushes the block's sign1 image (made with numpy, from the documented layout) and
# reads back the shard's compressed average, and the weights LU's decoded one.
#   hooks/compressed-dev.sh ISER_TOML TCP_TOML OUTDIR     (main.sh runs it; the TOMLs are not used)
set -uo pipefail
out=$3
# shellcheck source=tests/vm/guest/hooks/shards.sh
. "$(dirname "${BASH_SOURCE[0]}")/shards.sh"

shards_up "$repo/tests/vm/guest/configs/vm-compressed0.conf"
shards_attach iser "$out/iser.toml"
grad=$(dev_of "$out/iser.toml" 0 grad)
weights=$(dev_of "$out/iser.toml" 0 weights)
say "devcheck.py compressed $grad $weights"
timeout 120 python3 "$repo/tests/vm/guest/devcheck.py" compressed "$grad" "$weights" --block 65536 ||
  die "devcheck.py compressed failed (exit $?; 124 = timed out)"
