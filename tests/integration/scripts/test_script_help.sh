#!/usr/bin/env bash
# Every user-facing script's --help and -h print its usage and exit 0 with no side effect: no package install,
# no build, no daemon, no file written. Each runs from a copy of the tree, in an empty environment whose PATH
# starts with stubs of the commands that act (apt-get, dpkg, cmake, tgtd, ...): a stub that runs records its
# name. After the run the copy and the scratch home must be as they were and no stub may have run.
set -euo pipefail
# shellcheck source=tests/integration/shell_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_lib.sh"
parse_test_args "$@"
[ -n "$repo" ] || fail "--repo REPO is required"

scratch=$(mktemp -d /tmp/blockps-help-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
copy=$scratch/tree
mkdir -p "$copy" "$scratch/home" "$scratch/stubs"
(cd "$repo" && git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$copy") ||
  fail "could not copy the tree's files (git ls-files in $repo)"

# The commands that install, build, start or attach something.
for tool in apt apt-get dpkg dpkg-query dpkg-source cmake make ninja ctest c++ g++ gcc nvcc tgtd tgtadm tgt-admin \
  iscsiadm iscsid qemu-system-x86_64 qemu-img qemu-nbd systemctl debootstrap python3 pip3 fio ip tc modprobe \
  rdma iperf3 strip sudo mount; do
  printf '#!/bin/sh\necho "%s" >> "%s/ran"\nexit 1\n' "$tool" "$scratch" >"$scratch/stubs/$tool"
  chmod +x "$scratch/stubs/$tool"
done

scripts=(scripts/setup.sh scripts/test.sh scripts/ps-up.sh scripts/ps-down.sh scripts/demo.sh scripts/attach.sh
  scripts/fio-run.sh tests/vm/run.sh tests/fuzz/run.sh tests/soak/run.sh bench/cluster)
[ -f "$copy/tests/gpu/bundle.sh" ] && scripts+=(tests/gpu/bundle.sh tests/gpu/run.sh)

touch "$scratch/before"
sleep 1  # mtimes: a file written by a script is newer than the marker
for script in "${scripts[@]}"; do
  [ -f "$copy/$script" ] || fail "$script: not in the tree (update this test's list)"
  for flag in --help -h; do
    step "$script $flag"
    out=$scratch/out
    status=0
    (cd "$scratch/home" && timeout 30 env -i PATH="$scratch/stubs:/usr/bin:/bin:/usr/sbin:/sbin" \
      HOME="$scratch/home" TMPDIR="$scratch/home" bash "$copy/$script" "$flag") >"$out" 2>&1 || status=$?
    [ "$status" = 0 ] || fail "$script $flag exited $status: $(head -c 600 "$out")"
    grep -q "$(basename "$script")" "$out" || fail "$script $flag printed no usage naming it: $(head -c 600 "$out")"
    if [ -f "$scratch/ran" ]; then fail "$script $flag ran $(tr '\n' ' ' <"$scratch/ran")"; fi
    written=$(find "$copy" "$scratch/home" -newer "$scratch/before" \( -type f -o -type d -o -type l \) \
      -not -path "$scratch/home" | head -5)
    [ -z "$written" ] || fail "$script $flag wrote: $written"
  done
done

step "a command that fails under set -e, in a script that sources scripts/lib/messages.sh, says which"
cat >"$scratch/fails.sh" <<FAILS
#!/usr/bin/env bash
set -euo pipefail
blockps_prog=fails
. "$repo/scripts/lib/messages.sh"
found=\$(printf 'a\n' | grep b)
echo "never: \$found"
FAILS
status=0
out=$(bash "$scratch/fails.sh" 2>&1) || status=$?
[ "$status" = 1 ] || fail "the failing script exited $status: $out"
[ "$out" = "fails: ERROR: line 5: \`found=\$(printf 'a\\n' | grep b)\` failed (exit 1)" ] ||
  fail "the failing script did not say which command failed: $out"

echo "PASS: ${#scripts[@]} scripts print their usage for --help and -h and do nothing else; a failing command is named"
